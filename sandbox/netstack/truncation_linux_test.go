// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// truncServer answers every request with a body whose end is the connection's end (no
// Content-Length, no chunks: a client cannot tell a cut body from a whole one by its
// framing, only by how the connection ended):
//   - /big: 16 MiB, then a clean close;
//   - /reset: 1 MiB, then a reset (the destination failed mid-body);
//   - /stall: 1 MiB, then nothing while the connection stays open.
func truncServer(t *testing.T) (port int) {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	chunk := make([]byte, 64<<10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
				n := 16 << 20
				if req.URL.Path != "/big" {
					n = 1 << 20
				}
				for sent := 0; sent < n; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
				switch req.URL.Path {
				case "/reset":
					c.(*net.TCPConn).SetLinger(0)
				case "/stall":
					time.Sleep(10 * time.Second)
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// fetchEnd downloads path on c and returns the bytes read and how the connection ended
// (nil: a clean end, the body looks whole).
func fetchEnd(t *testing.T, c net.Conn, br *bufio.Reader, path string) (int64, error) {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: svc.test\r\n\r\n", path)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.ContentLength != -1 {
		t.Fatalf("the body has a length (%d): the test needs one ended by the connection", resp.ContentLength)
	}
	// A slow reader: fledge's side fills and waits, as a busy program makes it.
	var n int64
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if n < 2<<20 {
			time.Sleep(time.Millisecond)
		}
	}
}

// TestEgressCutTransferResets: a transfer fledge cannot complete (the connection's byte
// bound, the destination's reset, the idle timeout) reaches the program as a reset, never
// as a clean end that makes a cut body look whole, on every spliced path: an address grant,
// a granted name (each request decided, answers followed), a granted host loopback port and
// a CONNECT tunnel through the session's proxy; the close is recorded with why.
func TestEgressCutTransferResets(t *testing.T) {
	needEngine(t)
	port := truncServer(t)
	p := strconv.Itoa(port)
	host := hostAddr(t)
	n := &names{m: map[string]string{"svc.test": host}}
	for _, via := range []string{"address", "name", "loopback", "proxy"} {
		for _, c := range []struct {
			path, reason string
			lim          egress.Limits
		}{
			{"/big", egress.ReasonLimit, egress.Limits{MaxBytes: 4 << 20}},
			{"/reset", egress.ReasonReset, egress.Limits{}},
			{"/stall", "idle_timeout", egress.Limits{IdleTimeout: 500 * time.Millisecond}},
		} {
			t.Run(via+c.path, func(t *testing.T) {
				grants := map[string][]string{"address": {host + ":" + p},
					// The host's own address is reached by name only when it is granted too.
					"name": {"svc.test:" + p, host + ":" + p}, "loopback": {"localhost:" + p},
					"proxy": {"svc.test:" + p, host + ":" + p}}[via]
				var conn net.Conn
				var br *bufio.Reader
				var rec *recorder
				if via == "proxy" {
					conn, br, rec = proxyTunnel(t, grants, n, c.lim, "svc.test:"+p)
				} else {
					var e *Engine
					e, rec = startEngine(t, grants, n, c.lim)
					d := newNSDialer(t, e.NetNS())
					target := host
					switch via {
					case "name":
						fake, ok := e.fake.assign("svc.test")
						if !ok {
							t.Fatal("no session address for svc.test")
						}
						target = fake.String()
					case "loopback":
						target = "127.0.0.1"
					}
					var err error
					if conn, err = d.dial(target + ":" + p); err != nil {
						t.Fatal(err)
					}
					br = bufio.NewReader(conn)
				}
				start := time.Now()
				got, err := fetchEnd(t, conn, br, c.path)
				if err == nil {
					t.Fatalf("%s: the connection ended cleanly after %d bytes: a cut body looks whole", c.path, got)
				}
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("%s: after %d bytes the read failed with %v, want a reset", c.path, got, err)
				}
				if time.Since(start) > 15*time.Second {
					t.Fatalf("%s: the reset took %v", c.path, time.Since(start))
				}
				if ev := rec.await(egress.EventClose, "", true, c.reason); ev == nil {
					t.Fatalf("no close record with reason %s: %+v", c.reason, rec.all())
				}
			})
		}
	}
}

// proxyTunnel is a CONNECT tunnel to authority through an engine's session proxy.
func proxyTunnel(t *testing.T, grants []string, n *names, lim egress.Limits, authority string) (net.Conn, *bufio.Reader, *recorder) {
	t.Helper()
	pol, err := egress.NewPolicy(false, grants)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	e, err := NewShared(Config{Policy: pol, Limits: lim, Record: rec.add, Resolve: n.resolve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	px, err := e.StartProxy()
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(px.URL("http"))
	pw, _ := u.User.Password()
	c, err := net.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", px.Port()))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", authority, authority,
		base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", authority, err, resp)
	}
	return c, br, rec
}

// TestEgressCutTransferResetsBoundSecret: the same through a bound secret's destination
// (fledge terminates TLS, puts the token in and answers from its own HTTP server): an answer
// the destination cuts (its reset mid-body) never reaches the program as a clean end, even
// framed by the connection's end (an HTTP/1.0 request), and is recorded.
func TestEgressCutTransferResetsBoundSecret(t *testing.T) {
	needEngine(t)
	ca := newTestCA(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cert := ca.leaf(t, "api.test")
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer raw.Close()
				_ = raw.SetDeadline(time.Now().Add(30 * time.Second))
				c := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
				chunk := make([]byte, 64<<10)
				for i := 0; i < 16; i++ {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
				raw.(*net.TCPConn).SetLinger(0) // the destination fails mid-body
			}()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	_, otherPort, _ := server(t, "other-body")
	for _, proto := range []string{"HTTP/1.0", "HTTP/1.1"} {
		t.Run(proto, func(t *testing.T) {
			e, rec, ph, bundle := injectEngine(t, port, otherPort, ca.pool)
			d := newNSDialer(t, e.NetNS())
			c := attackConn(t, e, d, "api.test", port, true, bundle)
			fmt.Fprintf(c, "GET /cut %s\r\nHost: api.test\r\nAuthorization: Bearer %s\r\n\r\n", proto, ph)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer head: %v", err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("the answer ended cleanly after %d bytes: a cut body looks whole", n)
			}
			// The request went out (the secret in it): its record says the answer was cut.
			if rec.await(egress.EventHTTP, "api.test", true, egress.ReasonReset) == nil {
				t.Fatalf("no record of the cut answer: %+v", rec.all())
			}
			if rec.await(egress.EventClose, "api.test", true, egress.ReasonReset) == nil {
				t.Fatalf("the connection's close does not say it was cut: %+v", rec.all())
			}
		})
	}
}
