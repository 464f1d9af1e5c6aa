// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// routingServer is a server that hosts several sites and routes each request the way
// net/http reads it (r.Host: the absolute-form or CONNECT authority, else Host), answering
// "site:NAME"; a CONNECT it answers 200 and then "tunnel:NAME". It counts the requests
// each site got.
type routingServer struct {
	port uint16
	mu   sync.Mutex
	hits map[string]int
}

func newRoutingServer(t *testing.T) *routingServer {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := &routingServer{port: uint16(l.Addr().(*net.TCPAddr).Port), hits: map[string]int{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		rs.mu.Lock()
		rs.hits[host]++
		rs.mu.Unlock()
		if r.Method == http.MethodConnect {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(brw, "HTTP/1.1 200 Connection established\r\n\r\ntunnel:%s", host)
			brw.Flush()
			return
		}
		fmt.Fprintf(w, "site:%s", host)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return rs
}

func (rs *routingServer) got(site string) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.hits[site]
}

// leadingLineServer is a real server that skips empty lines before a request line, as
// RFC 9112 says a server should (Node's http module); it answers "site:" and the Host.
func leadingLineServer(t *testing.T) (uint16, func() string) {
	t.Helper()
	cmd, port := startNode(t, `const http=require('http');let seen=[];
const s=http.createServer((req,res)=>{seen.push((req.headers.host||'').split(':')[0]);res.end('site:'+(req.headers.host||''))});
s.listen(0,'127.0.0.1',()=>{console.log(s.address().port)});
process.stdin.on('data',()=>{console.log(JSON.stringify(seen))});`)
	return port, func() string {
		io.WriteString(cmd.stdin, "?\n")
		line, _ := cmd.out.ReadString('\n')
		return line
	}
}

// sendRaw sends data on one connection to svc.test:port from inside the namespace and
// returns what came back before the connection ended.
func sendRaw(t *testing.T, e *Engine, port uint16, data string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "request")
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := inNS(t, e, 30*time.Second, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket,sys
s=socket.create_connection(("svc.test",%d),timeout=15)
try:
  s.sendall(open(%q,"rb").read())
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
sys.stdout.write(d.decode("latin-1"))`, port, f))
	return out
}

// A grant for one name must not reach another site on a server that routes requests as
// HTTP says: every way of naming the other site is refused (name_mismatch, or bad_request
// when the request cannot be read as the server would), the other site is never served,
// and the same forms naming the granted name still work.
func TestEgressAttackFrontedRequests(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	need(t, "/usr/bin/python3")
	rs := newRoutingServer(t)
	n := &names{m: map[string]string{"svc.test": "127.0.0.1", "other.test": "127.0.0.1"}}
	p := rs.port
	grants := []string{fmt.Sprintf("svc.test:%d", p), fmt.Sprintf("127.0.0.1:%d", p)}
	e, rec := startEngine(t, grants, n, egress.Limits{})

	pad := strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 17) // over 16 KiB
	attacks := []struct{ name, req, reason string }{
		{"absolute-form", "GET http://other.test/ HTTP/1.1\r\nHost: svc.test\r\n\r\n", egress.ReasonNameMismatch},
		{"absolute-form-port", fmt.Sprintf("GET http://other.test:%d/ HTTP/1.1\r\nHost: svc.test\r\n\r\n", p), egress.ReasonNameMismatch},
		{"connect-false-host", "CONNECT other.test:443 HTTP/1.1\r\nHost: svc.test\r\n\r\n", egress.ReasonNameMismatch},
		{"connect-no-host", "CONNECT other.test:443 HTTP/1.1\r\n\r\n", egress.ReasonNameMismatch},
		{"unknown-method", "FOO / HTTP/1.1\r\nHost: other.test\r\n\r\n", egress.ReasonNameMismatch},
		{"host-after-16k", "GET / HTTP/1.1\r\n" + pad + "Host: other.test\r\n\r\n", egress.ReasonNameMismatch},
		{"host-after-64k", "GET / HTTP/1.1\r\n" + strings.Repeat(pad, 4) + "Host: other.test\r\n\r\n", egress.ReasonBadRequest},
		{"second-request", "GET / HTTP/1.1\r\nHost: svc.test\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n", egress.ReasonNameMismatch},
		{"second-after-body", "POST / HTTP/1.1\r\nHost: svc.test\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: other.test\r\n\r\n", egress.ReasonNameMismatch},
		{"second-after-chunked", "POST / HTTP/1.1\r\nHost: svc.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n", egress.ReasonNameMismatch},
		{"smuggled-cl-te", "POST / HTTP/1.1\r\nHost: svc.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n", egress.ReasonBadRequest},
		{"two-hosts", "GET / HTTP/1.1\r\nHost: svc.test\r\nHost: other.test\r\n\r\n", egress.ReasonBadRequest},
		{"h2c-prior-knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", egress.ReasonBadRequest},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			out := sendRaw(t, e, p, a.req)
			if strings.Contains(out, "other.test") {
				t.Fatalf("the other site answered: %q", out)
			}
			if rs.got("other.test") != 0 {
				t.Fatalf("the server routed %d request(s) to other.test", rs.got("other.test"))
			}
			host := "other.test"
			if a.reason == egress.ReasonBadRequest {
				host = "svc.test"
			}
			if rec.await(egress.EventConnect, host, false, a.reason) == nil {
				t.Fatalf("no %s record for %s: %+v", a.reason, host, rec.all())
			}
		})
	}

	// Leading empty lines are skipped by servers (Node's here): the request after them is
	// decided as the server reads it.
	t.Run("leading-empty-line", func(t *testing.T) {
		need(t, "node")
		np, seen := leadingLineServer(t)
		ge, grec := startEngine(t, []string{fmt.Sprintf("svc.test:%d", np), fmt.Sprintf("127.0.0.1:%d", np)}, n, egress.Limits{})
		out := sendRaw(t, ge, np, "\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
		if strings.Contains(out, "other.test") {
			t.Fatalf("the other site answered: %q", out)
		}
		if grec.await(egress.EventConnect, "other.test", false, egress.ReasonNameMismatch) == nil {
			t.Fatalf("no name_mismatch record: %+v", grec.all())
		}
		// Control: the same shape naming the granted name is served, empty lines and all.
		out = sendRaw(t, ge, np, "\r\nGET / HTTP/1.1\r\nHost: svc.test\r\nConnection: close\r\n\r\n")
		if !strings.Contains(out, "site:svc.test") {
			t.Fatalf("control: %q", out)
		}
		if s := seen(); strings.Contains(s, "other.test") || !strings.Contains(s, "svc.test") {
			t.Fatalf("node saw %s", s)
		}
	})

	// Controls: the same forms naming the granted name reach it, every request of a
	// kept-alive connection is served, and a CONNECT's tunnel carries its bytes.
	t.Run("controls", func(t *testing.T) {
		svc := fmt.Sprintf("svc.test:%d", p)
		for _, c := range []struct{ req, want string }{
			{"GET http://" + svc + "/ HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n", "site:svc.test"},
			{"FOO / HTTP/1.1\r\nHost: svc.test\r\nConnection: close\r\n\r\n", "site:svc.test"},
			{"GET / HTTP/1.1\r\n" + pad + "Host: svc.test\r\nConnection: close\r\n\r\n", "site:svc.test"},
			{"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\nPOST / HTTP/1.1\r\nHost: svc.test\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: svc.test\r\nConnection: close\r\n\r\n", "site:svc.testHTTP"},
			{"CONNECT " + svc + " HTTP/1.1\r\n\r\nping", "tunnel:svc.test"},
			{"GET / HTTP/1.0\r\n\r\n", "site:svc.test"},
		} {
			out := sendRaw(t, e, p, c.req)
			if !strings.Contains(out, strings.TrimSuffix(c.want, "HTTP")) {
				t.Fatalf("control %q: got %q", c.req[:min(40, len(c.req))], out)
			}
			if strings.HasSuffix(c.want, "HTTP") && strings.Count(out, "site:svc.test") != 3 {
				t.Fatalf("kept-alive control: %d answers in %q", strings.Count(out, "site:svc.test"), out)
			}
		}
		if rs.got("other.test") != 0 {
			t.Fatal("other.test was served")
		}
	})

	// Real clients through the check: Go's net/http client with keep-alive reuses one
	// connection for several requests.
	t.Run("go-client-keepalive", func(t *testing.T) {
		out, err := inNS(t, e, 30*time.Second, "curl", "-sS", "--max-time", "10",
			"http://"+fmt.Sprintf("svc.test:%d", p)+"/a", "http://"+fmt.Sprintf("svc.test:%d", p)+"/b")
		if err != nil || out != "site:svc.testsite:svc.test" {
			t.Fatalf("curl, two requests on one connection: %v %q", err, out)
		}
	})
}

type nodeProc struct {
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startNode runs a Node script that prints its port first.
func startNode(t *testing.T, script string) (*nodeProc, uint16) {
	t.Helper()
	cmd := exec.Command("node", "-e", script)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	br := bufio.NewReader(outp)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return &nodeProc{stdin: in, out: br}, uint16(port)
}
