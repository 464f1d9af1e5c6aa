// SPDX-License-Identifier: MIT

package netstack

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
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

// plan is the namespace a policy needs: the TUN device, the granted host loopback ports,
// the host's loopback nameservers.
func plan(loopPorts []uint16) *kernel.EgressNet {
	n := &kernel.EgressNet{TUN: tunName, Addr: tunAddr.As4(), MTU: tunMTU, LoopPorts: loopPorts}
	for _, a := range loopbackNameservers() {
		n.DNS = append(n.DNS, a.String())
	}
	return n
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
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	fds, err := kernel.BuildEgressNet(plan(loopPorts))
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	s, err := fromFDs(fds)
	if err != nil {
		ns.Close()
		return nil, err
	}
	s.ns = ns
	return s, nil
}

// fromFDs wraps the fds of a namespace built here or by a run's stub. It takes every fd,
// also on failure.
func fromFDs(fds *kernel.EgressFDs) (_ *nsSetup, err error) {
	s := &nsSetup{tunFD: fds.TUN}
	rest := append(append(append([]int{}, fds.Loop...), fds.DNSUDP...), fds.DNSTCP...)
	taken := 0
	defer func() {
		for _, fd := range rest[taken:] {
			_ = unix.Close(fd)
		}
		if err != nil {
			s.close()
		}
	}()
	listener := func(fd int) (net.Listener, error) {
		f := os.NewFile(uintptr(fd), "egress-listener")
		defer f.Close() // FileListener holds a dup
		l, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
		return l, nil
	}
	for _, fd := range fds.Loop {
		taken++
		l, err := listener(fd)
		if err != nil {
			return nil, err
		}
		s.listeners = append(s.listeners, l)
	}
	for _, fd := range fds.DNSUDP {
		taken++
		f := os.NewFile(uintptr(fd), "egress-dns")
		u, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
		s.dnsUDP = append(s.dnsUDP, u)
	}
	for _, fd := range fds.DNSTCP {
		taken++
		l, err := listener(fd)
		if err != nil {
			return nil, err
		}
		s.dnsTCP = append(s.dnsTCP, l)
	}
	return s, nil
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
