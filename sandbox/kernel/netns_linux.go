// SPDX-License-Identifier: MIT

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// ErrEgressNet wraps every failure to build an egress namespace's devices and sockets.
var ErrEgressNet = errors.New("egress namespace setup failed")

// BuildEgressNet sets up the calling thread's network namespace (freshly unshared, or the
// namespace the process was cloned into) as n says and returns its fds (close-on-exec).
// It needs CAP_NET_ADMIN over that namespace: root, or the first process of a new user
// namespace that owns it. On failure nothing stays open.
func BuildEgressNet(n *EgressNet) (_ *EgressFDs, err error) {
	fds := &EgressFDs{TUN: -1}
	defer func() {
		if err != nil {
			for _, fd := range fds.All() {
				if fd >= 0 {
					_ = unix.Close(fd)
				}
			}
		}
	}()
	// Only ever in a namespace made for the run: one that already has a device besides its
	// loopback is someone else's (the host's, for a launch that forgot CLONE_NEWNET).
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEgressNet, err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 || i.Name != "lo" {
			return nil, fmt.Errorf("%w: not a fresh network namespace (it has %s)", ErrEgressNet, i.Name)
		}
	}
	if fds.TUN, err = openTUN(n.TUN); err != nil {
		return nil, fmt.Errorf("%w: open /dev/net/tun: %w", ErrEgressNet, err)
	}
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEgressNet, err)
	}
	defer unix.Close(sock)
	if err := ifUp(sock, "lo"); err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(n.TUN)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEgressNet, err)
	}
	if err := ifr.SetInet4Addr(n.Addr[:]); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEgressNet, err)
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFADDR, ifr); err != nil {
		return nil, fmt.Errorf("%w: address of %s: %w", ErrEgressNet, n.TUN, err)
	}
	mtu, _ := unix.NewIfreq(n.TUN)
	mtu.SetUint32(n.MTU)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFMTU, mtu); err != nil {
		return nil, fmt.Errorf("%w: mtu of %s: %w", ErrEgressNet, n.TUN, err)
	}
	if err := ifUp(sock, n.TUN); err != nil {
		return nil, err
	}
	if err := defaultRoute(n.TUN); err != nil {
		return nil, err
	}
	for _, p := range n.LoopPorts {
		fd, err := listenOn(unix.SOCK_STREAM, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), p))
		if err != nil {
			return nil, fmt.Errorf("%w: loopback port %d in the namespace: %w", ErrEgressNet, p, err)
		}
		fds.Loop = append(fds.Loop, fd)
	}
	for _, s := range n.DNS {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.IsLoopback() {
			return nil, fmt.Errorf("%w: nameserver %q is not a loopback address", ErrEgressNet, s)
		}
		u, err := listenOn(unix.SOCK_DGRAM, netip.AddrPortFrom(a, 53))
		if err != nil {
			return nil, fmt.Errorf("%w: DNS on %s in the namespace: %w", ErrEgressNet, s, err)
		}
		fds.DNSUDP = append(fds.DNSUDP, u)
	}
	for _, s := range n.DNS {
		t, err := listenOn(unix.SOCK_STREAM, netip.AddrPortFrom(netip.MustParseAddr(s), 53))
		if err != nil {
			return nil, fmt.Errorf("%w: DNS on %s in the namespace: %w", ErrEgressNet, s, err)
		}
		fds.DNSTCP = append(fds.DNSTCP, t)
	}
	return fds, nil
}

// openTUN opens a TUN device without packet information, non-blocking (the userspace
// stack polls it), each packet behind a virtio-net header (TUNVnetHdrLen bytes) so that
// checksums can be left to the other side: TUN_F_CSUM lets the namespace's kernel hand
// over TCP segments it did not checksum, and fledge's segments come in marked the same way
// (packets that crossed only memory; a checksum guards against a wire, not a sender).
// No segmentation offload: with the 65520 MTU a segment is already the IPv4 maximum.
func openTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM); err != nil {
		unix.Close(fd)
		return -1, err
	}
	// Persistent: the last close of the fd then leaves the device to the end of its
	// namespace (the kernel's batched, asynchronous cleanup) instead of unregistering it
	// on the spot, which waits for an RCU grace period under the global rtnl lock (10-30 ms
	// per run, and every other namespace change on the host waits with it).
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// listenOn binds a socket (TCP listening, or UDP) to ap in the calling thread's namespace.
func listenOn(typ int, ap netip.AddrPort) (int, error) {
	fam := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		fam, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if typ == unix.SOCK_STREAM {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if typ == unix.SOCK_STREAM {
		if err := unix.Listen(fd, 128); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

func ifUp(sock int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrEgressNet, err)
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%w: flags of %s: %w", ErrEgressNet, name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%w: bring up %s: %w", ErrEgressNet, name, err)
	}
	return nil
}

// defaultRoute adds "default dev name" to the namespace's main table (rtnetlink).
func defaultRoute(name string) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrEgressNet, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("%w: netlink: %w", ErrEgressNet, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%w: netlink: %w", ErrEgressNet, err)
	}
	const hdr = unix.SizeofNlMsghdr
	msg := make([]byte, hdr+unix.SizeofRtMsg+8)
	le := binary.NativeEndian
	le.PutUint32(msg[0:], uint32(len(msg)))
	le.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	le.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	le.PutUint32(msg[8:], 1)
	rt := msg[hdr:]
	rt[0] = unix.AF_INET       // family
	rt[1] = 0                  // dst len: default
	rt[4] = unix.RT_TABLE_MAIN // table
	rt[5] = unix.RTPROT_BOOT   // protocol
	rt[6] = unix.RT_SCOPE_LINK // scope
	rt[7] = unix.RTN_UNICAST   // type
	at := msg[hdr+unix.SizeofRtMsg:]
	le.PutUint16(at[0:], 8)
	le.PutUint16(at[2:], unix.RTA_OIF)
	le.PutUint32(at[4:], uint32(ifi.Index))
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%w: add default route: %w", ErrEgressNet, err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("%w: add default route: %w", ErrEgressNet, err)
	}
	if n >= hdr+4 && le.Uint16(buf[4:]) == unix.NLMSG_ERROR {
		if code := int32(le.Uint32(buf[hdr:])); code != 0 {
			return fmt.Errorf("%w: add default route: %w", ErrEgressNet, unix.Errno(-code))
		}
	}
	return nil
}
