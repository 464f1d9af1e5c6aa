// SPDX-License-Identifier: MIT

package netstack

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// Bulk transfers move through the larger buffers (bulkBufSize, at most maxBulkBufs at once):
// more connections than there are buffers, each sending 8 MiB of random bytes that the
// server echoes while they are still being sent, through the TUN path and a granted
// loopback port, by a real client. Every byte comes back as sent, every connection is
// recorded with its counts, and every buffer is given back.
func TestEgressBulkIntactBothWays(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	need(t, "/usr/bin/python3")
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }() // echo until the client's end
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	const conns, size = maxBulkBufs + 4, 8 << 20
	for _, via := range []string{"tun", "loopback"} {
		t.Run(via, func(t *testing.T) {
			host := "127.0.0.1"
			if via == "tun" {
				host = hostAddr(t)
			}
			taken := bulkTaken.Load()
			e, rec := startEngine(t, []string{fmt.Sprintf("%s:%d", host, port)}, &names{}, egress.Limits{})
			out, err := inNS(t, e, 120*time.Second, "/usr/bin/python3", "-c", fmt.Sprintf(`import os, socket, threading
def one(res, i):
    data = os.urandom(%d)
    s = socket.create_connection(("%s", %d), timeout=60)
    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    w = threading.Thread(target=send); w.start()
    got = bytearray()
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += b
    w.join(); s.close()
    res[i] = got == data
res = [False] * %d
ts = [threading.Thread(target=one, args=(res, i)) for i in range(len(res))]
[t.start() for t in ts]; [t.join() for t in ts]
print("intact", sum(res), "of", len(res))`, size, host, port, conns))
			if err != nil || !strings.Contains(out, fmt.Sprintf("intact %d of %d", conns, conns)) {
				t.Fatalf("bulk echo: %v %q", err, out)
			}
			deadline := time.Now().Add(recordWait)
			for rec.count(egress.EventClose) < conns && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			for _, ev := range rec.all() {
				if ev.Kind == egress.EventClose && (ev.BytesIn != size || ev.BytesOut != size) {
					t.Errorf("close record counts %d in, %d out; want %d each: %+v", ev.BytesIn, ev.BytesOut, size, ev)
				}
			}
			if rec.count(egress.EventClose) != conns {
				t.Fatalf("%d close records, want %d", rec.count(egress.EventClose), conns)
			}
			if bulkTaken.Load() == taken {
				t.Fatal("no transfer went through a bulk buffer")
			}
			if n := len(bulkSlots); n != 0 {
				t.Fatalf("%d bulk buffers still out after every connection ended", n)
			}
		})
	}
}

// An answer to a granted name that crosses the connection's byte bound with its last
// bytes, from a server that then keeps the connection open: the connection ends at the
// bound, at once, with a reset (a cut answer never looks whole) and a limit record. (Before, the bytes that crossed were dropped and the
// engine went on waiting for more that never came: the program hung until the idle
// timeout.)
func TestEgressByteBoundOnLastRead(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	need(t, "/usr/bin/python3")
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const bound, first, last = 100 << 10, 90 << 10, 20 << 10
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil { // the request
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", first+last)
				c.Write(make([]byte, first))
				time.Sleep(200 * time.Millisecond) // the last bytes come in a read of their own
				c.Write(make([]byte, last))
				io.Copy(io.Discard, c) // kept alive: the server waits for the next request
			}()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	n := &names{m: map[string]string{"svc.test": "127.0.0.1"}}
	// The address is granted too: a granted name may not reach the host itself otherwise.
	e, rec := startEngine(t, []string{fmt.Sprintf("svc.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, n, egress.Limits{MaxBytes: bound})
	start := time.Now()
	out, err := inNS(t, e, 60*time.Second, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket
s = socket.create_connection(("svc.test", %d), timeout=30)
s.sendall(b"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\n")
got = 0
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += len(b)
    print("ended", got)
except ConnectionResetError:
    print("reset", got)
except socket.timeout:
    print("hung", got)`, port))
	if err != nil || !strings.HasPrefix(out, "reset") || time.Since(start) > 10*time.Second {
		t.Fatalf("byte bound crossed by the last read: %v %q after %v", err, out, time.Since(start))
	}
	waitRec(t, rec, egress.EventClose, egress.ReasonLimit)
}
