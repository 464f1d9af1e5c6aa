// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// dataFrame is an in-order data segment of n payload bytes from port to 10.9.0.1:80, its
// sequence number seq, acknowledging ack.
func dataFrame(port uint16, seq, ack uint32, n int) []byte {
	b := make([]byte, kernel.TUNVnetHdrLen+header.IPv4MinimumSize+header.TCPMinimumSize+n)
	ip := header.IPv4(b[kernel.TUNVnetHdrLen:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: rigRemote, DstAddr: rigLocal})
	ip.SetChecksum(^ip.CalculateChecksum())
	tc := header.TCP(ip[header.IPv4MinimumSize:])
	tc.Encode(&header.TCPFields{SrcPort: port, DstPort: 80, SeqNum: seq, AckNum: ack,
		DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck | header.TCPFlagPsh, WindowSize: 65535})
	for i := range tc.Payload() {
		tc.Payload()[i] = 'x'
	}
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, rigRemote, rigLocal, uint16(len(tc)))
	tc.SetChecksum(^tc.CalculateChecksum(checksum.Checksum(tc.Payload(), xsum)))
	return b
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestTUNLinkFloodToNonReaderBounded: a program floods one connection whose other end (a
// destination that does not read) never takes a byte, with segments of the size the size
// classes fit worst (a 2049-byte packet in a 4 KiB chunk). What fledge holds for the
// connection stays within twice the receive buffer (gVisor counts each segment's bytes and
// its bookkeeping against the buffer; the chunk's slack is at most the bytes again), the
// flood costs no more memory after the buffer is full, and the link keeps serving.
func TestTUNLinkFloodToNonReaderBounded(t *testing.T) {
	r := newFrameRig(t)
	// The engine's receive buffer range; moderation grows a buffer only as it is read.
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 8 << 20}
	if terr := r.st.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv); terr != nil {
		t.Fatal(terr)
	}
	mod := tcpip.TCPModerateReceiveBufferOption(true)
	r.st.SetTransportProtocolOption(tcp.ProtocolNumber, &mod)
	// The rig's listener on port 80 is never accepted from: its connections are read by
	// no one, as a destination that does not read leaves fledge's end of one.
	const port = 3200
	base := heapInUse()
	r.send(t, synFrame(port))
	seq := r.expectSynAck(t, port)
	r.send(t, ackFrame(port, seq))

	const payload = 2049 - header.IPv4MinimumSize - header.TCPMinimumSize
	next := uint32(1001)
	flood := func(k int) {
		for i := 0; i < k; i++ {
			f := dataFrame(port, next, seq+1, payload)
			for {
				_, err := unix.Write(r.peer, f)
				if err == unix.EAGAIN {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				break
			}
			next += payload
			// Drain what the stack answers so its writes never block on the pair.
			for r.next(t, 0) != nil {
			}
		}
	}
	// 8 MiB of segments: eight times the receive buffer.
	flood(4096)
	time.Sleep(200 * time.Millisecond)
	afterFirst := heapInUse()
	flood(4096)
	time.Sleep(200 * time.Millisecond)
	afterSecond := heapInUse()
	held := int64(afterSecond) - int64(base)
	t.Logf("heap held after 8 MiB: %d KiB, after 16 MiB: %d KiB (receive buffer %d KiB)",
		(int64(afterFirst)-int64(base))>>10, held>>10, rcv.Default>>10)
	// Twice the buffer, plus the stack's own per-connection state and the test's frames.
	if limit := int64(2*rcv.Default) + 1<<20; held > limit {
		t.Fatalf("a flood to a connection nobody reads holds %d KiB, more than %d KiB (twice the %d KiB receive buffer and 1 MiB)",
			held>>10, limit>>10, rcv.Default>>10)
	}
	if grew := int64(afterSecond) - int64(afterFirst); grew > 1<<20 {
		t.Fatalf("a further 8 MiB of flood to a full buffer grew the heap by %d KiB", grew>>10)
	}
	r.send(t, synFrame(port+1))
	r.expectSynAck(t, port+1)
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestTUNLinkEndMidFloodNoLeak: a namespace that ends while its program floods the link
// (the NIC removed and the stack closed with frames still arriving and being delivered),
// 200 times over: every end returns promptly, and no reader goroutine and no descriptor is
// left behind.
func TestTUNLinkEndMidFloodNoLeak(t *testing.T) {
	const rounds = 200
	round := func() {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		link, err := newFrameLink(fds[0])
		if err != nil {
			t.Fatal(err)
		}
		st := stack.New(stack.Options{
			NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
			TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
		})
		if terr := st.CreateNIC(1, link); terr != nil {
			t.Fatal(terr)
		}
		st.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
			AddressWithPrefix: rigLocal.WithPrefix()}, stack.AddressProperties{})
		st.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
		ln, err := gonet.ListenTCP(st, tcpip.FullAddress{NIC: 1, Addr: rigLocal, Port: 80}, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		flooded := make(chan struct{})
		go func() {
			defer close(flooded)
			buf := make([]byte, 1<<17)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// SYNs (each answered, so the link's writes run too) and data segments.
				_, _ = unix.Write(fds[1], synFrame(uint16(10000+i%5000)))
				_, _ = unix.Write(fds[1], dataFrame(uint16(10000+i%5000), 1001, 1, 1000))
				for {
					// EAGAIN: nothing more now; 0: the link's end is closed.
					if n, err := unix.Read(fds[1], buf); err != nil || n == 0 {
						break
					}
				}
			}
		}()
		time.Sleep(2 * time.Millisecond)
		done := make(chan struct{})
		go func() {
			ln.Close()
			st.RemoveNIC(1)
			st.Close()
			st.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a namespace ended mid-flood did not stop within 10 s")
		}
		close(stop)
		<-flooded
		select {
		case <-link.done:
		default:
			t.Fatal("the link's reader still runs after its stack ended")
		}
		unix.Close(fds[1])
	}
	round() // warm the pools and the runtime's own goroutines
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	g0, f0 := runtime.NumGoroutine(), openFDs(t)
	for i := 0; i < rounds; i++ {
		round()
	}
	// gVisor's timers and processors end a moment after Wait; give them that moment.
	deadline := time.Now().Add(5 * time.Second)
	var g1, f1 int
	for {
		runtime.GC()
		g1, f1 = runtime.NumGoroutine(), openFDs(t)
		if (g1 <= g0+2 && f1 <= f0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d namespaces ended mid-flood: goroutines %d -> %d, fds %d -> %d", rounds, g0, g1, f0, f1)
	if g1 > g0+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines %d -> %d over %d ends:\n%s", g0, g1, rounds, buf[:runtime.Stack(buf, true)])
	}
	if f1 > f0 {
		t.Fatalf("open descriptors %d -> %d over %d ends", f0, f1, rounds)
	}
}

// TestTUNLinkFrameSizeEdges: the largest packet the MTU allows, frames of 64 KiB and
// 64 KiB+1, one that fills the read buffer exactly and ones past it (up to the IPv4
// maximum): none reaches the stack as more bytes than the buffer holds (a cut packet's
// IPv4 length then exceeds what arrived, and the stack drops it), none crashes the reader;
// a zero-length frame is dropped; the reader serves on after each.
func TestTUNLinkFrameSizeEdges(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	link, err := newFrameLink(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	h := &heldDispatcher{}
	link.Attach(h)
	defer link.Close()
	// The packet buffer behind the header is tunReadSize bytes: a frame longer than
	// header and buffer is cut there (a TUN read reports the cut, a seqpacket read not).
	most := kernel.TUNVnetHdrLen + tunReadSize
	sizes := []int{0, kernel.TUNVnetHdrLen + tunMTU, 1 << 16, 1<<16 + 1, most, most + 1, kernel.TUNVnetHdrLen + 65535, 100}
	for _, n := range sizes {
		f := make([]byte, n)
		if n > kernel.TUNVnetHdrLen {
			f[kernel.TUNVnetHdrLen] = 0x45
		}
		if _, err := unix.Write(fds[1], f); err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
	}
	want := []int{tunMTU, 1<<16 - kernel.TUNVnetHdrLen, 1<<16 + 1 - kernel.TUNVnetHdrLen, tunReadSize, tunReadSize, tunReadSize, 90}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		k := len(h.got)
		h.mu.Unlock()
		if k >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d packets delivered: the reader stopped", k, len(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, n := range want {
		if h.got[i] != n {
			t.Fatalf("packet %d: %d bytes delivered, want %d (delivered: %v)", i, h.got[i], n, h.got)
		}
	}
	if d := link.dropped.Load(); d != 1 {
		t.Fatalf("%d frames dropped, want 1 (the zero-length one)", d)
	}
}
