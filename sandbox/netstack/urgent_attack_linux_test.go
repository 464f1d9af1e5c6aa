// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/egress"
)

// TestEgressUrgentByteNoSpin: a destination that sends a TCP urgent byte neither stalls the
// bytes around it nor makes fledge spin: the connection's bytes arrive without it and
// fledge's CPU stays idle while the destination then sends nothing. A copy that sizes its
// reads by what the host socket says it holds (FIONREAD stops at the urgent mark, and a
// read skips the byte) is where this breaks.
func TestEgressUrgentByteNoSpin(t *testing.T) {
	needEngine(t)
	host := hostAddr(t)
	l, err := net.Listen("tcp4", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		rc, _ := c.(*net.TCPConn).SyscallConn()
		_, _ = c.Write([]byte("abc"))
		time.Sleep(50 * time.Millisecond)
		_ = rc.Write(func(fd uintptr) bool { _ = unix.Sendto(int(fd), []byte("X"), unix.MSG_OOB, nil); return true })
		time.Sleep(50 * time.Millisecond)
		_, _ = c.Write([]byte("def"))
		<-hold // then quiet, the connection kept open
	}()
	port := l.Addr().(*net.TCPAddr).Port
	e, _ := startEngine(t, []string{host + ":" + strconv.Itoa(port)}, &names{}, egress.Limits{})
	d := newNSDialer(t, e.NetNS())
	c, err := d.dial(host + ":" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 0, 8)
	buf := make([]byte, 8)
	for len(got) < 6 {
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil && err != io.EOF {
			t.Fatalf("after %q: %v", got, err)
		}
	}
	if string(got) != "abcdef" {
		t.Fatalf("got %q, want abcdef (the urgent byte is not data)", got)
	}
	c0 := cpuTime()
	time.Sleep(time.Second)
	if used := cpuTime() - c0; used > 300*time.Millisecond {
		t.Fatalf("fledge used %v of CPU in a quiet second after an urgent byte: it spins", used)
	}
}
