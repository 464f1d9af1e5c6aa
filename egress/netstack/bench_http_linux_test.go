//go:build linux

package netstack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != size {
				b.Fatalf("got %d bytes", n)
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
			e, err := Start(Config{Policy: pol, Record: func(egress.Event) {}, Resolve: func(context.Context, string) ([]netip.Addr, time.Duration, error) {
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
