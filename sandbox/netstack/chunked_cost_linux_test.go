// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// fledge re-frames a chunked request body itself. A program that sends its body as
// one-byte chunks must not make fledge write (a system call, and a packet to the
// destination) for every few bytes: that turns a few bytes of the program's into
// thousands of times their cost in fledge, outside the program's own CPU bound. The
// destination gets the body in about as many reads as an unchunked one.
func TestEgressAttackTinyChunksAmplify(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	need(t, "/usr/bin/python3")
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var reads, got atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1<<16)
				for {
					n, err := c.Read(b)
					reads.Add(1)
					got.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	n := &names{m: map[string]string{"svc.test": "127.0.0.1"}}
	e, _ := startEngine(t, []string{fmt.Sprintf("svc.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, n, egress.Limits{})

	const chunks = 200000
	body := "POST / HTTP/1.1\r\nHost: svc.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strings.Repeat("1\r\nX\r\n", chunks) + "0\r\n\r\n"
	f := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := inNS(t, e, 60*time.Second, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket
s=socket.create_connection(("svc.test",%d),timeout=30)
s.sendall(open(%q,"rb").read())
s.shutdown(socket.SHUT_WR)
s.recv(1)`, port, f))
	if err != nil {
		t.Fatalf("client: %v %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() < int64(len(body)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got.Load() != int64(len(body)) {
		t.Fatalf("the destination got %d of %d bytes", got.Load(), len(body))
	}
	if r := reads.Load(); r > chunks/100 {
		t.Fatalf("a body of %d one-byte chunks reached the destination in %d reads (a write per chunk line)", chunks, r)
	}
}
