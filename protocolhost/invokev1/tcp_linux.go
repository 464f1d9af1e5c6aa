// SPDX-License-Identifier: MIT

package invokev1

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// dialPlugin connects to a TCP plugin. A plugin without network runs in a network namespace
// of its own, which nothing outside can reach: fledge makes its socket inside that
// namespace (on a throwaway thread that entered it), so the plugin's port is reachable by
// fledge alone. A socket belongs to the namespace it was made in, whichever thread uses it.
func dialPlugin(pid int, inNetns bool, addr *net.TCPAddr, timeout time.Duration) (net.Conn, error) {
	if !inNetns {
		return net.DialTimeout("tcp", addr.String(), timeout)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("the plugin's network namespace: %w", err)
	}
	defer ns.Close()
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, now in the plugin's namespace, dies with this goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{-1, fmt.Errorf("enter the plugin's network namespace: %w", err)}
			return
		}
		// A new namespace's loopback is down: the plugin can bind and listen, but nothing
		// connects until it is up.
		if err := loopbackUp(); err != nil {
			ch <- result{-1, fmt.Errorf("loopback in the plugin's namespace: %w", err)}
			return
		}
		family := unix.AF_INET
		if addr.IP.To4() == nil {
			family = unix.AF_INET6
		}
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			ch <- result{-1, err}
			return
		}
		tv := unix.NsecToTimeval(timeout.Nanoseconds())
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		var sa unix.Sockaddr
		if ip4 := addr.IP.To4(); ip4 != nil {
			a := &unix.SockaddrInet4{Port: addr.Port}
			copy(a.Addr[:], ip4)
			sa = a
		} else {
			a := &unix.SockaddrInet6{Port: addr.Port}
			copy(a.Addr[:], addr.IP.To16())
			sa = a
		}
		if err := unix.Connect(fd, sa); err != nil {
			unix.Close(fd)
			ch <- result{-1, err}
			return
		}
		ch <- result{fd, nil}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	f := os.NewFile(uintptr(r.fd), "plugin-socket")
	defer f.Close()
	return net.FileConn(f)
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// exposedListener returns the address of a socket listening on TCP port in fledge's own
// network namespace on anything but loopback ("" if none). Without a namespace of its own
// a plugin's port rule cannot restrict the bind address, so fledge checks what it bound
// before connecting (/proc/net/tcp and tcp6; state 0A is LISTEN).
func exposedListener(port int) string {
	// thread-self, not self: /proc/self/net is the main thread's namespace, and a probe
	// that unshared on a locked thread may have left that one elsewhere.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, file := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			hexIP, hexPort, ok := strings.Cut(f[1], ":")
			if !ok {
				continue
			}
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil || int(p) != port {
				continue
			}
			ip := procIP(hexIP)
			if ip == nil || !ip.IsLoopback() {
				return net.JoinHostPort(fmt.Sprint(ip), strconv.Itoa(port))
			}
		}
	}
	return ""
}

// procIP decodes an address of /proc/net/tcp*: 32-bit words in host byte order.
func procIP(h string) net.IP {
	if len(h) != 8 && len(h) != 32 {
		return nil
	}
	ip := make(net.IP, len(h)/2)
	for i := 0; i < len(h); i += 8 {
		w, err := strconv.ParseUint(h[i:i+8], 16, 32)
		if err != nil {
			return nil
		}
		binary.NativeEndian.PutUint32(ip[i/2:], uint32(w))
	}
	return ip
}
