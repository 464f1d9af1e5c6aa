// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// BenchmarkEgressHTTPDownload: a 64 MiB HTTP/1.1 body on a kept-alive connection, direct,
// through fledge to an address grant (spliced unread), and through fledge to a granted
// name (every request decided, every answer followed).
func BenchmarkEgressHTTPDownload(b *testing.B) {
	const size = 64 << 20
	body := make([]byte, 1<<20)
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for n := 0; n < size; n += len(body) {
			w.Write(body)
		}
	})}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	get := func(b *testing.B, c net.Conn, host string) {
		br := bufio.NewReaderSize(c, 64<<10)
		for i := 0; i < b.N; i++ {
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != size {
				b.Fatalf("got %d bytes: %v", n, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.SetBytes(size)
		get(b, c, "svc.test")
	})
	host := hostAddr(b)
	for _, via := range []string{"address", "name"} {
		b.Run("fledge-"+via, func(b *testing.B) {
			if err := Supported(); err != nil {
				b.Skip(err)
			}
			p := strconv.Itoa(port)
			pol, err := egress.NewPolicy(false, []string{host + ":" + p, "svc.test:" + p})
			if err != nil {
				b.Fatal(err)
			}
			// One kept-alive connection carries every iteration: past the default byte bound
			// (1 GiB, 16 downloads) fledge would end it, rightly.
			e, err := Start(Config{Policy: pol, Limits: egress.Limits{MaxBytes: 1 << 50}, Record: func(egress.Event) {}, Resolve: func(context.Context, string) ([]netip.Addr, time.Duration, error) {
				return []netip.Addr{netip.MustParseAddr(host)}, time.Minute, nil
			}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { e.Close() })
			d := newNSDialer(b, e.NetNS())
			target := host
			if via == "name" {
				fake, ok := e.fake.assign("svc.test")
				if !ok {
					b.Fatal("no fake address")
				}
				target = fake.String()
			}
			c, err := d.dial(target + ":" + p)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(size)
			b.ResetTimer()
			get(b, c, "svc.test")
		})
	}
}

// BenchmarkEgressHTTPSInject: a small HTTPS request through fledge to a granted name,
// spliced end to end against the same through a bound secret (TLS terminated with the
// session CA, the token put in, TLS of fledge's own to the server), on a kept-alive
// connection ("keepalive") and on a new connection each time ("newconn"). Each iteration
// times one of each, alternating, so a load that comes and goes weighs on both alike;
// reported as spliced-ns/op, inject-ns/op and their ratio.
func BenchmarkEgressHTTPSInject(b *testing.B) {
	ca := newBenchCA(b)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Authorization")[:6])
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(b, "api.test")}}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	type path struct {
		d     *nsDialer
		fake  string
		trust *x509.CertPool
		token string
	}
	mk := func(inject bool) path {
		pol, err := egress.NewPolicy(false, []string{"api.test:" + port, "127.0.0.1:" + port})
		if err != nil {
			b.Fatal(err)
		}
		cfg := Config{Policy: pol, Record: func(egress.Event) {}, RootCAs: ca.pool,
			Resolve: func(context.Context, string) ([]netip.Addr, time.Duration, error) {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute, nil
			}}
		p := path{trust: ca.pool, token: "Bearer real-token-value"}
		if inject {
			d, _ := egress.ParseDest("api.test:" + port)
			pol.Secrets = []egress.Secret{{Name: "T", Placeholder: "fledge-placeholder-00", Value: "real-token-value", Dests: []egress.Dest{d}}}
			sca, err := egress.NewCA(pol.InterceptNames())
			if err != nil {
				b.Fatal(err)
			}
			cfg.CA = sca
			p.trust = x509.NewCertPool()
			p.trust.AppendCertsFromPEM(sca.PEM())
			p.token = "Bearer fledge-placeholder-00"
		}
		e, err := Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		p.d = newNSDialer(b, e.NetNS())
		fake, _ := e.fake.assign("api.test")
		p.fake = fake.String() + ":" + port
		return p
	}
	spliced, inject := mk(false), mk(true)
	for _, conn := range []string{"keepalive", "newconn"} {
		b.Run(conn, func(b *testing.B) {
			client := func(p path) (*http.Client, func()) {
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.trust}, DisableKeepAlives: conn == "newconn",
					DialContext: func(context.Context, string, string) (net.Conn, error) { return p.d.dial(p.fake) }}
				return &http.Client{Transport: tr}, tr.CloseIdleConnections
			}
			get := func(c *http.Client, p path) time.Duration {
				start := time.Now()
				req, _ := http.NewRequest("GET", "https://api.test:"+port+"/", nil)
				req.Header.Set("Authorization", p.token)
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(body) != "Bearer" {
					b.Fatalf("body %q", body)
				}
				return time.Since(start)
			}
			cs, closeS := client(spliced)
			ci, closeI := client(inject)
			defer closeS()
			defer closeI()
			get(cs, spliced)
			get(ci, inject)
			var ts, ti time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					ts += get(cs, spliced)
					ti += get(ci, inject)
				} else {
					ti += get(ci, inject)
					ts += get(cs, spliced)
				}
			}
			b.ReportMetric(float64(ts.Nanoseconds())/float64(b.N), "spliced-ns/op")
			b.ReportMetric(float64(ti.Nanoseconds())/float64(b.N), "inject-ns/op")
			b.ReportMetric(float64(ti)/float64(ts), "ratio")
		})
	}
}

func newBenchCA(b *testing.B) *testCA { return newTestCAtb(b) }
