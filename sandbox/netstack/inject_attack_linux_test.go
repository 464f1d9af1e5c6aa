// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// attackConn is a program's connection to name:port through the engine (TLS with the
// session CA's bundle when tlsOn), as a hostile plugin would open it.
func attackConn(t *testing.T, e *Engine, d *nsDialer, name string, port uint16, tlsOn bool, bundle string) net.Conn {
	t.Helper()
	fake, _ := e.fake.assign(name)
	c, err := d.dial(fake.String() + ":" + strconv.Itoa(int(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if !tlsOn {
		return c
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(bundle)
	pool.AppendCertsFromPEM(pem)
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// rawExchange sends raw on c and reads one answer.
func rawExchange(t *testing.T, c net.Conn, raw string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err.Error()
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, string(b)
}

// wireTap is a TCP listener standing for a TLS destination: it keeps every byte it is
// sent in the clear and answers as a TLS server does to plain HTTP.
type wireTap struct {
	port uint16
	mu   sync.Mutex
	got  []byte
}

func (w *wireTap) seen() string { w.mu.Lock(); defer w.mu.Unlock(); return string(w.got) }

func newWireTap(t *testing.T) *wireTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	w := &wireTap{port: uint16(ln.Addr().(*net.TCPAddr).Port)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 4096)
				n, _ := c.Read(buf)
				w.mu.Lock()
				w.got = append(w.got, buf[:n]...)
				w.mu.Unlock()
				io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			}()
		}
	}()
	return w
}

// A program that speaks plain HTTP to a bound destination (a TLS port) does not make
// fledge send the value over the network in the clear: the request is refused and
// recorded, and the wire never carries the value.
func TestInjectAttackPlainHTTPDowngrade(t *testing.T) {
	needEngine(t)
	tap := newWireTap(t)
	_, otherPort, _ := server(t, "other-body")
	e, rec, ph, _ := injectEngine(t, tap.port, otherPort, newTestCA(t).pool)
	d := newNSDialer(t, e.NetNS())
	c := attackConn(t, e, d, "api.test", tap.port, false, "")
	resp, body := rawExchange(t, c, "GET /user HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(tap.seen(), realToken) {
		t.Fatalf("fledge sent the value in the clear to the bound destination: %q", tap.seen())
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a bound placeholder over plain HTTP was not refused: %v %q", resp, body)
	}
	if rec.await(egress.EventHTTP, "api.test", false, egress.ReasonPlaceholder) == nil {
		t.Fatalf("no unbound_secret record: %+v", rec.all())
	}
}

// fledge's kept-alive connections to a destination are kept apart by scheme: a plain one,
// left by a plain-HTTP request of the program, never carries a request the program sent
// over TLS (with the value put in) in the clear.
func TestInjectAttackPooledPlainConnection(t *testing.T) {
	needEngine(t)
	var mu sync.Mutex
	var auths []string
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, "plain")
	}))
	t.Cleanup(plain.Close)
	port := uint16(plain.Listener.Addr().(*net.TCPAddr).Port)
	_, otherPort, _ := server(t, "other-body")
	e, _, ph, bundle := injectEngine(t, port, otherPort, newTestCA(t).pool)
	d := newNSDialer(t, e.NetNS())
	// A plain request with no placeholder leaves a plain connection to the host idle.
	c := attackConn(t, e, d, "api.test", port, false, "")
	if resp, body := rawExchange(t, c, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"); resp == nil || body != "plain" {
		t.Fatalf("plain request: %v %q", resp, body)
	}
	c.Close()
	time.Sleep(100 * time.Millisecond)
	// The same destination over TLS, with the placeholder.
	tc := attackConn(t, e, d, "api.test", port, true, bundle)
	rawExchange(t, tc, "GET /user HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
	mu.Lock()
	defer mu.Unlock()
	for _, a := range auths {
		if strings.Contains(a, realToken) {
			t.Fatalf("a request sent over TLS went on in the clear with the value: %q", auths)
		}
	}
}

// TRACE makes a server answer with the request it got, headers included (Apache's default):
// fledge does not forward it to a destination it puts a secret in.
func TestInjectAttackTraceReflects(t *testing.T) {
	needEngine(t)
	ca := newTestCA(t)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "TRACE" {
			w.Header().Set("Content-Type", "message/http")
			r.Header.Write(w)
			return
		}
		io.WriteString(w, "ok")
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "api.test")}}
	s.StartTLS()
	t.Cleanup(s.Close)
	port := uint16(s.Listener.Addr().(*net.TCPAddr).Port)
	_, otherPort, _ := server(t, "other-body")
	e, rec, ph, bundle := injectEngine(t, port, otherPort, ca.pool)
	d := newNSDialer(t, e.NetNS())
	c := attackConn(t, e, d, "api.test", port, true, bundle)
	resp, body := rawExchange(t, c, "TRACE / HTTP/1.1\r\nHost: api.test\r\nX-Echo: "+ph+"\r\n\r\n")
	if strings.Contains(body, realToken) {
		t.Fatalf("the value came back to the program: %q", body)
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("TRACE to a bound destination: %v %q", resp, body)
	}
	if rec.await(egress.EventHTTP, "api.test", false, egress.ReasonBadRequest) == nil {
		t.Fatalf("no bad_request record: %+v", rec.all())
	}
}

// A path a server may read as another than the rule sees is refused: a dot segment with
// path parameters ("..;", as Tomcat and Spring read it) or one encoded twice (as a server
// that decodes twice reads it).
func TestInjectAttackRulePathTricks(t *testing.T) {
	needEngine(t)
	ca := newTestCA(t)
	api := newAPIServer(t, ca, "")
	_, otherPort, _ := server(t, "other-body")
	e, rec, _, bundle := injectEngine(t, api.port, otherPort, ca.pool)
	d := newNSDialer(t, e.NetNS())
	c := attackConn(t, e, d, "rules.test", api.port, true, bundle)
	if resp, body := rawExchange(t, c, "GET /allowed/x HTTP/1.1\r\nHost: rules.test\r\n\r\n"); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("allowed: %v %q", resp, body)
	}
	for _, p := range []string{"/allowed/..;/other", "/allowed/%2e%2e;x/other", "/allowed/.;/../other", "/allowed/%252e%252e/other",
		"/allowed/%252E./other", "/allowed/x%252fother", "/allowed/x%25255c..%25255cother"} {
		c := attackConn(t, e, d, "rules.test", api.port, true, bundle)
		before := len(api.saw())
		resp, body := rawExchange(t, c, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: rules.test\r\n\r\n", p))
		if resp == nil || resp.StatusCode != http.StatusForbidden || len(api.saw()) != before {
			t.Fatalf("%s: not refused by the rule: %v %q", p, resp, body)
		}
	}
	if rec.await(egress.EventHTTP, "rules.test", false, egress.ReasonRule) == nil {
		t.Fatalf("no rule record: %+v", rec.all())
	}
}

// A destination that never answers does not hold the session open: the engine closes in
// bounded time with a program's request to it in flight (HTTP/1.1, fledge's own round
// tripper).
func TestInjectAttackSilentUpstreamClose(t *testing.T) {
	needEngine(t)
	ca := newTestCA(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "api.test")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Read(make([]byte, 4096)) // the request; never an answer
				got <- struct{}{}
				time.Sleep(time.Minute)
			}()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	_, otherPort, _ := server(t, "other-body")
	e, _, ph, bundle := injectEngine(t, port, otherPort, ca.pool)
	d := newNSDialer(t, e.NetNS())
	c := attackConn(t, e, d, "api.test", port, true, bundle)
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the destination")
	}
	c.Close()
	done := make(chan struct{})
	go func() { e.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine did not close: a request to a silent destination holds it")
	}
}

// A bound destination answering with a head that never ends (here 200 KiB of one header
// line) is not read into fledge's memory: the program gets 502, not the head.
func TestInjectAttackEndlessAnswerHead(t *testing.T) {
	needEngine(t)
	ca := newTestCA(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "api.test")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Read(make([]byte, 4096))
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Long: "+strings.Repeat("a", 200<<10)+"\r\nContent-Length: 2\r\n\r\nok")
				time.Sleep(2 * time.Second)
			}()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	_, otherPort, _ := server(t, "other-body")
	e, _, ph, bundle := injectEngine(t, port, otherPort, ca.pool)
	d := newNSDialer(t, e.NetNS())
	c := attackConn(t, e, d, "api.test", port, true, bundle)
	io.WriteString(c, "GET /long HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+ph+"\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, " 502 ") {
		t.Fatalf("an endless answer head: the program got %q", line)
	}
}
