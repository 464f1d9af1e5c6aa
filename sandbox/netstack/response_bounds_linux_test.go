// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// fledge reads a destination's answers on a name-checked connection to learn whether a
// CONNECT or an upgrade succeeded. A destination the program controls (a granted plain
// HTTP host) must not make that reading hold its answer in fledge's memory: an endless
// header line, an endless run of header lines, or of trailer lines after a chunked body,
// cost fledge no more than its bounded buffers while the bytes pass to the program.
func TestEgressAttackEndlessResponseHead(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	need(t, "/usr/bin/python3")
	const total = 256 << 20
	for _, c := range []struct{ name, start, unit string }{
		{"header-line", "HTTP/1.1 200 OK\r\nX-Long: ", strings.Repeat("a", 1<<16)},
		{"header-lines", "HTTP/1.1 200 OK\r\n", strings.Repeat("X-A: a\r\n", 1<<13)},
		{"trailer-lines", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n", strings.Repeat("X-A: a\r\n", 1<<13)},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				c2, err := l.Accept()
				if err != nil {
					return
				}
				defer c2.Close()
				b := make([]byte, 4096)
				c2.Read(b)
				io.WriteString(c2, c.start)
				for n := 0; n < total; n += len(c.unit) {
					if _, err := io.WriteString(c2, c.unit); err != nil {
						return
					}
				}
			}()
			port := uint16(l.Addr().(*net.TCPAddr).Port)
			n := &names{m: map[string]string{"svc.test": "127.0.0.1"}}
			e, _ := startEngine(t, []string{fmt.Sprintf("svc.test:%d", port), fmt.Sprintf("127.0.0.1:%d", port)}, n, egress.Limits{})
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base, peak := ms.HeapInuse, ms.HeapInuse
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapInuse)
				}
			}()
			out, err := inNS(t, e, 60*time.Second, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket
s=socket.create_connection(("svc.test",%d),timeout=30)
s.sendall(b"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\n")
n=0
while True:
  d=s.recv(1<<20)
  if not d: break
  n+=len(d)
print(n)`, port))
			close(stop)
			<-done
			if err != nil || !strings.HasPrefix(out, fmt.Sprint(len(c.start)+total)) {
				t.Fatalf("the program did not get the answer: %v %q", err, out)
			}
			if grew := (peak - base) >> 20; grew > 64 {
				t.Fatalf("a %d MiB answer head grew fledge's heap by %d MiB", total>>20, grew)
			}
		})
	}
}
