// SPDX-License-Identifier: MIT

package netstack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// The TUN link: gVisor's fdbased endpoint reads and writes a virtio-net header only on
// sockets, so the TUN device (opened with IFF_VNET_HDR and TUN_F_CSUM by kernel) is served
// here. What the header buys: fledge's TCP segments go in marked "checksum partial" (gVisor
// writes only the pseudo-header sum, the namespace's kernel then checks nothing), and the
// namespace's segments come out unchecksummed (fledge never verified them). The packets
// crossed only memory between two stacks on one host; a checksum guards against a wire, it
// is no check of who sent a packet, and every connection is decided whatever it carries.

// ErrTUNNoVnetHdr: the TUN fd handed to the engine was not opened with a virtio-net header.
var ErrTUNNoVnetHdr = errors.New("TUN device has no virtio-net header")

const (
	vnetHdrLen = kernel.TUNVnetHdrLen
	// virtio_net_hdr fields (linux/virtio_net.h).
	vnetFlagNeedsCsum = 1
	vnetGSONone       = 0
	// tunReadSize holds the largest packet the MTU allows behind its header.
	tunReadSize = vnetHdrLen + tunMTU
	// tunSmallCopy: a packet below this size is copied out of the read buffer into a chunk
	// of its own size class (the next power of two), larger ones take the read buffer
	// itself (a 64 KiB chunk). Either way a packet holds at most twice its bytes: gVisor
	// counts a segment's bytes, not its chunk, against the receive buffer, and a program
	// sending mid-sized segments to a destination that does not read must not make fledge
	// hold 64 KiB for each.
	tunSmallCopy = tunReadSize / 2
)

// tunLink is a stack.LinkEndpoint on a TUN fd with virtio-net headers. One goroutine reads
// and hands each packet to the stack inline; writes come from gVisor's goroutines.
type tunLink struct {
	f   *os.File
	rc  syscall.RawConn
	mtu atomic.Uint32

	disp    atomic.Pointer[stack.NetworkDispatcher]
	started sync.Once
	running atomic.Bool
	stop    sync.Once
	done    chan struct{}

	// dropped counts frames the reader threw away (short, unknown header, not IPv4).
	dropped atomic.Uint64
}

var (
	_ stack.LinkEndpoint = (*tunLink)(nil)
	_ stack.GSOEndpoint  = (*tunLink)(nil)
)

// newTUNLink serves fd (not taken: the link works on its own duplicate, closed when the NIC
// is removed, so that a read in flight never sees the number reused).
func newTUNLink(fd int) (*tunLink, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return nil, fmt.Errorf("TUNGETIFF: %w", err)
	}
	if ifr.Uint16()&unix.IFF_VNET_HDR == 0 {
		return nil, ErrTUNNoVnetHdr
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	return newFrameLink(d)
}

// newFrameLink serves any non-blocking fd whose reads and writes are one frame each (a TUN
// device with a virtio-net header, or a datagram socket in tests); it takes fd.
func newFrameLink(fd int) (*tunLink, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "tun")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &tunLink{f: f, rc: rc, done: make(chan struct{})}
	l.mtu.Store(tunMTU)
	return l, nil
}

func (l *tunLink) MTU() uint32                             { return l.mtu.Load() }
func (l *tunLink) SetMTU(mtu uint32)                       { l.mtu.Store(mtu) }
func (l *tunLink) MaxHeaderLength() uint16                 { return 0 }
func (l *tunLink) LinkAddress() tcpip.LinkAddress          { return "" }
func (l *tunLink) SetLinkAddress(tcpip.LinkAddress)        {}
func (l *tunLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (l *tunLink) AddHeader(*stack.PacketBuffer)           {}
func (l *tunLink) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (l *tunLink) SetOnCloseAction(func())                 {}

// Capabilities: received checksums are not verified (see the top of this file).
func (l *tunLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// GSOMaxSize and SupportedGSO make gVisor's TCP leave its segments' checksums to the
// receiving kernel (NeedsCsum); the size keeps every segment within one packet of the MTU,
// so no segment ever needs segmenting.
func (l *tunLink) GSOMaxSize() uint32               { return tunMTU }
func (l *tunLink) SupportedGSO() stack.SupportedGSO { return stack.HostGSOSupported }

func (l *tunLink) IsAttached() bool { return l.disp.Load() != nil }

// Attach starts the reader on the first dispatcher; nil (the NIC's removal, under the
// stack's lock) stops it without waiting: the reader may be delivering a packet, which
// needs that lock. Wait, called outside it, waits for the reader's end.
func (l *tunLink) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		l.disp.Store(nil)
		l.stop.Do(func() { _ = l.f.Close() })
		return
	}
	l.disp.Store(&d)
	l.started.Do(func() {
		l.running.Store(true)
		go l.readLoop()
	})
}

// Close ends the reader (a read in flight returns), closes the duplicate fd and waits for
// the reader's end. gVisor calls it outside its locks (RemoveNIC's deferred close).
func (l *tunLink) Close() {
	l.stop.Do(func() { _ = l.f.Close() })
	l.Wait()
}

// Wait waits for the reader to end, if it was started (it ends once the fd is closed).
func (l *tunLink) Wait() {
	if l.running.Load() {
		<-l.done
	}
}

func (l *tunLink) readLoop() {
	defer close(l.done)
	var hdr [vnetHdrLen]byte
	v := buffer.NewViewSize(tunReadSize)
	defer func() { v.Release() }()
	for {
		var n int
		var rerr error
		iov := [2][]byte{hdr[:], v.AsSlice()}
		err := l.rc.Read(func(fd uintptr) bool {
			n, rerr = readv2(int(fd), iov[0], iov[1])
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr != nil {
			if rerr == unix.EINTR {
				continue
			}
			return
		}
		d := l.disp.Load()
		if d == nil {
			return
		}
		payload, ok := frame(hdr[:], n)
		if !ok || !isIPv4(v.AsSlice()) {
			l.dropped.Add(1)
			continue
		}
		var pv *buffer.View
		if payload < tunSmallCopy {
			pv = buffer.NewViewWithData(v.AsSlice()[:payload])
		} else {
			pv = v
			pv.CapLength(payload)
			v = buffer.NewViewSize(tunReadSize)
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithView(pv)})
		(*d).DeliverNetworkPacket(header.IPv4ProtocolNumber, pkt)
		pkt.DecRef()
	}
}

// frame checks a frame read as n bytes of which hdr is the virtio-net header, and returns
// the size of its IPv4 packet. Dropped: a frame shorter than its header and a minimal IPv4
// header, a segmentation request (never asked for: no TSO was offered, so only a kernel
// that ignored that, or a forged header, makes one), and anything not IPv4 (the namespace
// has no IPv6 route). Checksum flags are ignored: nothing received is verified.
func frame(hdr []byte, n int) (int, bool) {
	if n < vnetHdrLen+header.IPv4MinimumSize || len(hdr) < vnetHdrLen {
		return 0, false
	}
	if hdr[1] != vnetGSONone {
		return 0, false
	}
	return n - vnetHdrLen, true
}

// isIPv4 says whether a packet starts as IPv4 does.
func isIPv4(p []byte) bool {
	return len(p) > 0 && p[0]>>4 == header.IPv4Version
}

// WritePackets writes each packet behind its virtio-net header. A TCP segment gVisor left
// the checksum of (NeedsCsum: it wrote the pseudo-header sum) is marked "checksum partial"
// at the TCP header; everything else went out with its checksums complete.
func (l *tunLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	sent := 0
	for _, pkt := range pkts.AsSlice() {
		if err := l.writePacket(pkt); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

func (l *tunLink) writePacket(pkt *stack.PacketBuffer) tcpip.Error {
	var hdr [vnetHdrLen]byte
	if pkt.GSOOptions.Type != stack.GSONone && pkt.GSOOptions.NeedsCsum {
		hdr[0] = vnetFlagNeedsCsum
		hl := pkt.HeaderSize()
		l3 := pkt.NetworkHeader().View().Size()
		binary.NativeEndian.PutUint16(hdr[2:], uint16(hl))
		binary.NativeEndian.PutUint16(hdr[6:], uint16(l3))
		binary.NativeEndian.PutUint16(hdr[8:], pkt.GSOOptions.CsumOffset)
	}
	bufs := pkt.AsSlices()
	iov := make([][]byte, 0, 1+len(bufs))
	iov = append(iov, hdr[:])
	iov = append(iov, bufs...)
	var werr error
	err := l.rc.Write(func(fd uintptr) bool {
		_, werr = unix.Writev(int(fd), iov)
		return werr != unix.EAGAIN
	})
	if err != nil {
		return &tcpip.ErrClosedForSend{}
	}
	if werr != nil {
		// A packet the namespace's kernel refused (its queue full, the device going): the
		// stack retransmits as for a packet lost on a wire.
		return &tcpip.ErrAborted{}
	}
	return nil
}

// readv2 is readv(2) into two buffers.
func readv2(fd int, a, b []byte) (int, error) {
	for {
		n, err := unix.Readv(fd, [][]byte{a, b})
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}
