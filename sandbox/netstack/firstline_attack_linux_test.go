// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// sendSegments sends each segment on one connection to svc.test:port from inside the
// namespace, pausing between them so each arrives on its own, and returns what came back.
func sendSegments(t *testing.T, e *Engine, port uint16, segs ...string) string {
	t.Helper()
	var files []string
	for i, s := range segs {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("seg%d", i))
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, fmt.Sprintf("%q", f))
	}
	out, _ := inNS(t, e, 30*time.Second, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket,sys,time
s=socket.create_connection(("svc.test",%d),timeout=15)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
try:
  for f in [%s]:
    s.sendall(open(f,"rb").read())
    time.sleep(0.3)
  s.shutdown(socket.SHUT_WR)
except OSError as e:
  sys.stdout.write("[send error]")
d=b""
try:
  while True:
    c=s.recv(65536)
    if not c: break
    d+=c
except OSError as e:
  d+=b"[error]"
sys.stdout.write(d.decode("latin-1"))`, port, strings.Join(files, ",")))
	return out
}

// A first message that fledge takes for another protocol is spliced unchecked, so every
// line a real server reads as a request line must be held to HTTP's rules. Node's parser
// (llhttp) reads more than "METHOD TARGET HTTP/x.y": RTSP/ and ICE/ versions, HTTP/0.9
// lines of any method (with headers after them), and any run of CR and LF before the
// request line. Each of these naming other.test as the first bytes of a connection to
// svc.test must be refused, never served by the other site.
func TestEgressAttackFirstLineNotSniffedAsHTTP(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	need(t, "/usr/bin/python3")
	need(t, "node")
	n := &names{m: map[string]string{"svc.test": "127.0.0.1", "other.test": "127.0.0.1"}}
	np, seen := leadingLineServer(t)
	e, rec := startEngine(t, []string{fmt.Sprintf("svc.test:%d", np), fmt.Sprintf("127.0.0.1:%d", np)}, n, egress.Limits{})

	for _, a := range []struct {
		name string
		segs []string
	}{
		{"rtsp-version", []string{"GET / RTSP/1.0\r\nHost: other.test\r\n\r\n"}},
		{"ice-version", []string{"SOURCE / ICE/1.0\r\nHost: other.test\r\n\r\n"}},
		{"http09-post", []string{"POST /\r\nHost: other.test\r\n\r\n"}},
		{"http09-absolute", []string{"GET http://other.test/\r\nHost: other.test\r\n\r\n"}},
		{"http09-asterisk", []string{"OPTIONS *\r\nHost: other.test\r\n\r\n"}},
		{"cr-cr-lf-before", []string{"\r\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"}},
		{"lone-cr-segment", []string{"\r", "\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"}},
		{"cr-then-method", []string{"\rGET", " / HTTP/1.1\r\nHost: other.test\r\n\r\n"}},
	} {
		t.Run(a.name, func(t *testing.T) {
			out := sendSegments(t, e, np, a.segs...)
			if strings.Contains(out, "site:other.test") {
				t.Fatalf("the other site answered: %q", out)
			}
			if s := seen(); strings.Contains(s, "other.test") {
				t.Fatalf("node routed a request to other.test: %s", s)
			}
			if rec.await(egress.EventConnect, "svc.test", false, egress.ReasonBadRequest) == nil &&
				rec.await(egress.EventConnect, "other.test", false, egress.ReasonNameMismatch) == nil {
				t.Fatalf("no refusal recorded: %+v", rec.all())
			}
		})
	}
}
