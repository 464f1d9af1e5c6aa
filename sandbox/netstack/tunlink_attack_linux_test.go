// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"encoding/binary"
	"errors"
	"runtime"
	"sync"
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

// frameRig is a TUN link on one end of a SOCK_SEQPACKET pair (one frame per message, as
// the TUN device gives them) attached to a gVisor stack that listens on 10.9.0.1:80; the
// test writes frames as the namespace's kernel would and reads what the link writes.
type frameRig struct {
	peer int
	link *tunLink
	st   *stack.Stack
}

var (
	rigLocal  = tcpip.AddrFrom4([4]byte{10, 9, 0, 1})
	rigRemote = tcpip.AddrFrom4([4]byte{10, 9, 0, 2})
)

func newFrameRig(t *testing.T) *frameRig {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
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
	if terr := st.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: rigLocal.WithPrefix()}, stack.AddressProperties{}); terr != nil {
		t.Fatal(terr)
	}
	st.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	l, err := gonet.ListenTCP(st, tcpip.FullAddress{NIC: 1, Addr: rigLocal, Port: 80}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	r := &frameRig{peer: fds[1], link: link, st: st}
	t.Cleanup(func() {
		l.Close()
		done := make(chan struct{})
		go func() {
			st.RemoveNIC(1)
			st.Close()
			st.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the link did not stop within 10 s of the NIC's removal")
		}
		unix.Close(fds[1])
	})
	return r
}

func (r *frameRig) send(t *testing.T, frame []byte) {
	t.Helper()
	if _, err := unix.Write(r.peer, frame); err != nil {
		t.Fatal(err)
	}
}

// next returns the next frame the link wrote, or nil after d.
func (r *frameRig) next(t *testing.T, d time.Duration) []byte {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(r.peer), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(d.Milliseconds()))
	if err != nil && !errors.Is(err, unix.EINTR) {
		t.Fatal(err)
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, 1<<17)
	k, err := unix.Read(r.peer, b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:k]
}

// synFrame is a TCP SYN from 10.9.0.2:port to 10.9.0.1:80 behind a virtio-net header.
func synFrame(port uint16) []byte {
	b := make([]byte, kernel.TUNVnetHdrLen+header.IPv4MinimumSize+header.TCPMinimumSize)
	ip := header.IPv4(b[kernel.TUNVnetHdrLen:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: rigRemote, DstAddr: rigLocal})
	ip.SetChecksum(^ip.CalculateChecksum())
	tc := header.TCP(ip[header.IPv4MinimumSize:])
	tc.Encode(&header.TCPFields{SrcPort: port, DstPort: 80, SeqNum: 1000, DataOffset: header.TCPMinimumSize,
		Flags: header.TCPFlagSyn, WindowSize: 65535})
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, rigRemote, rigLocal, header.TCPMinimumSize)
	tc.SetChecksum(^tc.CalculateChecksum(xsum))
	return b
}

// expectSynAck waits for the stack's answer to synFrame(port): a SYN-ACK to that port
// behind a virtio-net header, its checksum complete once the header's request is done.
func (r *frameRig) expectSynAck(t *testing.T, port uint16) (seq uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f := r.next(t, time.Until(deadline))
		if len(f) < kernel.TUNVnetHdrLen+header.IPv4MinimumSize+header.TCPMinimumSize {
			continue
		}
		ip := header.IPv4(f[kernel.TUNVnetHdrLen:])
		tc := header.TCP(ip.Payload())
		if tc.DestinationPort() != port || tc.Flags() != header.TCPFlagSyn|header.TCPFlagAck {
			continue
		}
		completeChecksum(t, f)
		if !tc.IsChecksumValid(ip.SourceAddress(), ip.DestinationAddress(), checksum.Checksum(tc.Payload(), 0), uint16(len(tc.Payload()))) {
			t.Fatalf("SYN-ACK with a wrong checksum once completed: % x", f)
		}
		return tc.SequenceNumber()
	}
	t.Fatalf("no SYN-ACK to port %d: the link stopped serving", port)
	return 0
}

// completeChecksum does the receiving kernel's part of a checksum-partial frame: the sum
// from csum_start on, folded into the pseudo-header sum gVisor left at csum_offset. It
// reports whether the frame asked for it.
func completeChecksum(t *testing.T, f []byte) bool {
	t.Helper()
	if f[0]&vnetFlagNeedsCsum == 0 {
		return false
	}
	ip := f[kernel.TUNVnetHdrLen:]
	start := int(binary.NativeEndian.Uint16(f[6:]))
	off := int(binary.NativeEndian.Uint16(f[8:]))
	if start+off+2 > len(ip) {
		t.Fatalf("checksum offsets %d+%d past a %d-byte packet", start, off, len(ip))
	}
	seg := ip[start:]
	binary.BigEndian.PutUint16(seg[off:], ^checksum.Checksum(seg, 0))
	return true
}

// malformedFrames are what a broken or hostile source could put on the TUN fd: no header,
// a header alone, segmentation requests (gso_size 0, huge sizes), offsets pointing past the
// packet, lengths that do not match, not IPv4, and the largest frame there is.
func malformedFrames() [][]byte {
	syn := synFrame(4000)
	hdr := func(flags, gso byte, hdrLen, gsoSize, start, off uint16, rest []byte) []byte {
		b := make([]byte, kernel.TUNVnetHdrLen, kernel.TUNVnetHdrLen+len(rest))
		b[0], b[1] = flags, gso
		binary.NativeEndian.PutUint16(b[2:], hdrLen)
		binary.NativeEndian.PutUint16(b[4:], gsoSize)
		binary.NativeEndian.PutUint16(b[6:], start)
		binary.NativeEndian.PutUint16(b[8:], off)
		return append(b, rest...)
	}
	ipPart := syn[kernel.TUNVnetHdrLen:]
	badLen := append([]byte(nil), ipPart...)
	binary.BigEndian.PutUint16(badLen[2:], 65535) // IPv4 total length far past the frame
	badIHL := append([]byte(nil), ipPart...)
	badIHL[0] = 0x4f // header length 60 in a 40-byte packet
	v6 := append([]byte(nil), ipPart...)
	v6[0] = 0x60
	huge := make([]byte, kernel.TUNVnetHdrLen+tunMTU+100) // larger than the read buffer
	copy(huge, syn)
	return [][]byte{
		{},
		{1},
		make([]byte, kernel.TUNVnetHdrLen),
		hdr(0, 0, 0, 0, 0, 0, make([]byte, 8)),
		hdr(0, 1, 0, 0, 0, 0, ipPart), // GSO TCPv4, gso_size 0
		hdr(1, 1, 65535, 65535, 65535, 65535, ipPart), // every field at its maximum
		hdr(0, 4, 54, 1, 20, 16, ipPart),              // GSO TCPv6 on IPv4
		hdr(0, 5, 0, 1400, 0, 0, ipPart),              // GSO UDP_L4
		hdr(0, 0x81, 0, 1400, 0, 0, ipPart),           // ECN bit with GSO
		hdr(1, 0, 0, 0, 60000, 60000, ipPart),         // checksum offsets past the packet
		hdr(0xff, 0, 0xffff, 0, 0, 0, ipPart),         // unknown flags
		hdr(0, 0, 0, 0, 0, 0, badLen),
		hdr(0, 0, 0, 0, 0, 0, badIHL),
		hdr(0, 0, 0, 0, 0, 0, v6),
		hdr(0, 0, 0, 0, 0, 0, ipPart[:header.IPv4MinimumSize]), // IPv4 header, no TCP
		huge,
	}
}

// TestTUNLinkMalformedFrames: frames with a broken or hostile virtio-net header, or a broken
// packet behind a valid one, are dropped; the link neither crashes nor stops serving (a
// valid SYN afterwards is answered) and stops promptly when its NIC is removed.
func TestTUNLinkMalformedFrames(t *testing.T) {
	r := newFrameRig(t)
	r.send(t, synFrame(3000))
	r.expectSynAck(t, 3000)
	for _, f := range malformedFrames() {
		if len(f) == 0 {
			continue // a zero-length message is no frame on a TUN device
		}
		r.send(t, f)
	}
	r.send(t, synFrame(3001))
	r.expectSynAck(t, 3001)
	if d := r.link.dropped.Load(); d < 8 {
		t.Fatalf("%d malformed frames dropped by the link, want at least 8", d)
	}
}

// FuzzTUNLinkFrame: any frame handed to the link leaves it serving.
func FuzzTUNLinkFrame(f *testing.F) {
	for _, fr := range malformedFrames() {
		if len(fr) > 0 && len(fr) < 4096 {
			f.Add(fr)
		}
	}
	f.Add(synFrame(5000))
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) == 0 {
			return
		}
		r := newFrameRig(t)
		r.send(t, frame)
		r.send(t, synFrame(3002))
		r.expectSynAck(t, 3002)
	})
}

// TestTUNLinkRefusesPlainTUN: a TUN fd without a virtio-net header is refused (its packets
// would be read as headers), not served.
func TestTUNLinkRefusesPlainTUN(t *testing.T) {
	needEngine(t)
	ch := make(chan error, 1)
	go func() {
		// A thread of its own in a namespace of its own, never given back (exits locked).
		runtimeLockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			ch <- err
			return
		}
		defer unix.Close(fd)
		ifr, _ := unix.NewIfreq("plain0")
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			ch <- err
			return
		}
		_, err = newTUNLink(fd)
		ch <- err
	}()
	if err := <-ch; !errors.Is(err, ErrTUNNoVnetHdr) {
		t.Fatalf("newTUNLink on a TUN without IFF_VNET_HDR: %v, want ErrTUNNoVnetHdr", err)
	}
}

func runtimeLockOSThread() { runtime.LockOSThread() }

// ackFrame acknowledges the stack's SYN-ACK (seq) for the connection from port.
func ackFrame(port uint16, seq uint32) []byte {
	b := synFrame(port)
	tc := header.TCP(b[kernel.TUNVnetHdrLen+header.IPv4MinimumSize:])
	tc.Encode(&header.TCPFields{SrcPort: port, DstPort: 80, SeqNum: 1001, AckNum: seq + 1,
		DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 65535})
	return b
}

// TestTUNLinkChecksumPartialIsCompletable: the data segments the link hands the
// namespace's kernel unchecksummed carry what that kernel needs to finish the checksum
// (csum_start at the TCP header, csum_offset at its checksum field, the pseudo-header sum
// in it), and the finished checksum is right: a kernel that does check (or forwards the
// packet) sees a valid segment.
func TestTUNLinkChecksumPartialIsCompletable(t *testing.T) {
	r := newFrameRig(t)
	l, err := gonet.ListenTCP(r.st, tcpip.FullAddress{NIC: 1, Addr: rigLocal, Port: 81}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	syn := synFrame(3100)
	header.TCP(syn[kernel.TUNVnetHdrLen+header.IPv4MinimumSize:]).SetDestinationPort(81)
	r.send(t, syn)
	var seq uint32
	deadline := time.Now().Add(10 * time.Second)
	for seq == 0 && time.Now().Before(deadline) {
		if f := r.next(t, time.Until(deadline)); len(f) >= 50 {
			tc := header.TCP(header.IPv4(f[kernel.TUNVnetHdrLen:]).Payload())
			if tc.Flags() == header.TCPFlagSyn|header.TCPFlagAck {
				seq = tc.SequenceNumber()
			}
		}
	}
	ack := ackFrame(3100, seq)
	header.TCP(ack[kernel.TUNVnetHdrLen+header.IPv4MinimumSize:]).SetDestinationPort(81)
	r.send(t, ack)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := []byte("checksum left to the namespace's kernel")
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		f := r.next(t, time.Until(deadline))
		if len(f) < kernel.TUNVnetHdrLen+header.IPv4MinimumSize+header.TCPMinimumSize {
			continue
		}
		ip := header.IPv4(f[kernel.TUNVnetHdrLen:])
		tc := header.TCP(ip.Payload())
		if len(tc.Payload()) == 0 {
			continue
		}
		if !completeChecksum(t, f) {
			t.Fatalf("a data segment went out without the checksum-partial mark: % x", f[:kernel.TUNVnetHdrLen])
		}
		if s, o := binary.NativeEndian.Uint16(f[6:]), binary.NativeEndian.Uint16(f[8:]); s != uint16(ip.HeaderLength()) || o != header.TCPChecksumOffset {
			t.Fatalf("csum_start %d, csum_offset %d; want %d, %d", s, o, ip.HeaderLength(), header.TCPChecksumOffset)
		}
		if !tc.IsChecksumValid(ip.SourceAddress(), ip.DestinationAddress(), checksum.Checksum(tc.Payload(), 0), uint16(len(tc.Payload()))) {
			t.Fatalf("data segment with a wrong checksum once completed: % x", f)
		}
		if !ip.IsChecksumValid() {
			t.Fatal("IPv4 header checksum not written (the kernel always checks it)")
		}
		if string(tc.Payload()) != string(payload) {
			t.Fatalf("payload %q", tc.Payload())
		}
		return
	}
	t.Fatal("no data segment")
}

// heldDispatcher keeps what the link delivers: how many bytes each packet holds and how
// much memory its chunks take.
type heldDispatcher struct {
	mu   sync.Mutex
	got  []int
	held []int
}

func (h *heldDispatcher) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	n, c := 0, 0
	for _, s := range pkt.AsSlices() {
		n += len(s)
		c += cap(s)
	}
	h.mu.Lock()
	h.got, h.held = append(h.got, n), append(h.held, c)
	h.mu.Unlock()
}

func (h *heldDispatcher) DeliverLinkPacket(tcpip.NetworkProtocolNumber, *stack.PacketBuffer) {}

// TestTUNLinkPacketMemoryBounded: a packet the link hands to the stack holds at most about
// twice its bytes. gVisor counts a queued segment's bytes, not its buffer, against the
// receive buffer: a program that sends mid-sized segments to a destination that does not
// read would otherwise make fledge hold a 64 KiB buffer for each (32 times the bytes of a
// 2 KiB segment, times the receive buffer, times the connections).
func TestTUNLinkPacketMemoryBounded(t *testing.T) {
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
	sizes := []int{100, 2049, 5000, 20000, 33000, 40000, tunMTU}
	for _, n := range sizes {
		f := make([]byte, kernel.TUNVnetHdrLen+n)
		f[kernel.TUNVnetHdrLen] = 0x45
		if _, err := unix.Write(fds[1], f); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		k := len(h.got)
		h.mu.Unlock()
		if k == len(sizes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d packets delivered", k, len(sizes))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, n := range sizes {
		if h.got[i] != n {
			t.Fatalf("packet %d: %d bytes delivered, want %d", i, h.got[i], n)
		}
		if h.held[i] > 2*n+64 {
			t.Errorf("a %d-byte packet holds %d bytes of buffer (more than twice its size)", n, h.held[i])
		}
	}
}
