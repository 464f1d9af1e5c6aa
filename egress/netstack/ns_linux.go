package netstack

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/link/tun"
)

// tunName, tunAddr: the device fledge puts in the plugin's namespace. Its netmask is 0, so
// the kernel's own prefix route sends every IPv4 destination that is not the namespace's
// loopback into it; there is no IPv6 route at all, so an IPv6 connect fails at once
// (ENETUNREACH) and nothing of it leaves.
const (
	tunName = "tun0"
	tunMTU  = 65520
)

var tunAddr = netip.MustParseAddr("10.77.0.2")

type nsSetup struct {
	ns        *os.File
	tunFD     int
	listeners []net.Listener
	// dnsUDP, dnsTCP answer a loopback nameserver of the host's resolv.conf (127.0.0.53 of
	// systemd-resolved): inside the namespace that address is its own loopback, which would
	// otherwise answer nothing.
	dnsUDP []net.PacketConn
	dnsTCP []net.Listener
}

// resolvConf is the resolver configuration the plugin sees (its view shows the host's /etc).
var resolvConf = "/etc/resolv.conf"

// loopbackNameservers are the loopback addresses among resolv.conf's nameservers.
func loopbackNameservers() []netip.Addr {
	b, err := os.ReadFile(resolvConf)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Unmap().IsLoopback() && len(out) < 3 {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}

// newNamespace makes a network namespace holding only lo and the TUN device, and listening
// sockets on the namespace's 127.0.0.1 for loopPorts (the granted host loopback ports).
// It runs on a thread of its own that unshares its network namespace and is never given
// back to the Go scheduler (the goroutine ends locked, so the thread exits). Needs
// CAP_SYS_ADMIN and CAP_NET_ADMIN in the user namespace that owns the host's network
// namespace (root).
func newNamespace(loopPorts []uint16) (*nsSetup, error) {
	ch := make(chan struct {
		s   *nsSetup
		err error
	}, 1)
	go func() {
		runtime.LockOSThread()
		s, err := setupOnThread(loopPorts)
		ch <- struct {
			s   *nsSetup
			err error
		}{s, err}
	}()
	r := <-ch
	return r.s, r.err
}

func setupOnThread(loopPorts []uint16) (_ *nsSetup, err error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("%w: unshare(CLONE_NEWNET): %w", ErrSetup, err)
	}
	s := &nsSetup{tunFD: -1}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.ns, err = os.Open("/proc/thread-self/ns/net"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if s.tunFD, err = tun.Open(tunName); err != nil {
		return nil, fmt.Errorf("%w: open /dev/net/tun: %w", ErrSetup, err)
	}
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	defer unix.Close(sock)
	if err := ifUp(sock, "lo"); err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(tunName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	a := tunAddr.As4()
	if err := ifr.SetInet4Addr(a[:]); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFADDR, ifr); err != nil {
		return nil, fmt.Errorf("%w: address of %s: %w", ErrSetup, tunName, err)
	}
	mtu, _ := unix.NewIfreq(tunName)
	mtu.SetUint32(tunMTU)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFMTU, mtu); err != nil {
		return nil, fmt.Errorf("%w: mtu of %s: %w", ErrSetup, tunName, err)
	}
	if err := ifUp(sock, tunName); err != nil {
		return nil, err
	}
	if err := defaultRoute(tunName); err != nil {
		return nil, err
	}
	for _, a := range loopbackNameservers() {
		hp := net.JoinHostPort(a.String(), "53")
		u, err := net.ListenPacket("udp", hp)
		if err != nil {
			return nil, fmt.Errorf("%w: DNS on %s in the namespace: %w", ErrSetup, hp, err)
		}
		s.dnsUDP = append(s.dnsUDP, u)
		l, err := net.Listen("tcp", hp)
		if err != nil {
			return nil, fmt.Errorf("%w: DNS on %s in the namespace: %w", ErrSetup, hp, err)
		}
		s.dnsTCP = append(s.dnsTCP, l)
	}
	for _, p := range loopPorts {
		l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(p))))
		if err != nil {
			return nil, fmt.Errorf("%w: loopback port %d in the namespace: %w", ErrSetup, p, err)
		}
		s.listeners = append(s.listeners, l)
	}
	return s, nil
}

func ifUp(sock int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%w: flags of %s: %w", ErrSetup, name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%w: bring up %s: %w", ErrSetup, name, err)
	}
	return nil
}

func (s *nsSetup) close() {
	if s == nil {
		return
	}
	for _, l := range s.listeners {
		_ = l.Close()
	}
	for _, l := range s.dnsTCP {
		_ = l.Close()
	}
	for _, u := range s.dnsUDP {
		_ = u.Close()
	}
	if s.tunFD >= 0 {
		_ = unix.Close(s.tunFD)
		s.tunFD = -1
	}
	if s.ns != nil {
		_ = s.ns.Close()
	}
}

// Supported says whether this process can build an egress namespace here, and if not why.
func Supported() error {
	s, err := newNamespace(nil)
	if err != nil {
		return err
	}
	s.close()
	return nil
}

// defaultRoute adds "default dev name" to the namespace's main table (rtnetlink): every
// IPv4 destination that is not the namespace's own loopback goes into the TUN device.
func defaultRoute(name string) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("%w: netlink: %w", ErrSetup, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%w: netlink: %w", ErrSetup, err)
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
		return fmt.Errorf("%w: add default route: %w", ErrSetup, err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("%w: add default route: %w", ErrSetup, err)
	}
	if n >= hdr+4 && le.Uint16(buf[4:]) == unix.NLMSG_ERROR {
		if code := int32(le.Uint32(buf[hdr:])); code != 0 {
			return fmt.Errorf("%w: add default route: %w", ErrSetup, unix.Errno(-code))
		}
	}
	return nil
}
