// SPDX-License-Identifier: MIT

package netstack

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/egress"
)

// nsDialer dials from inside the engine's namespace: a locked thread that joined it makes
// the sockets (a socket keeps the namespace it was made in), as a plugin's program would.
type nsDialer struct {
	req chan string
	res chan dialRes
}

type dialRes struct {
	c   net.Conn
	err error
}

func newNSDialer(b testing.TB, ns *os.File) *nsDialer {
	d := &nsDialer{req: make(chan string), res: make(chan dialRes)}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ready <- err
			return
		}
		ready <- nil
		for a := range d.req {
			c, err := net.DialTimeout("tcp4", a, 10*time.Second)
			d.res <- dialRes{c, err}
		}
	}()
	if err := <-ready; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { close(d.req) })
	return d
}

func (d *nsDialer) dial(a string) (net.Conn, error) {
	d.req <- a
	r := <-d.res
	return r.c, r.err
}

// benchServer serves "e" (echo one byte back and close), "s" (read everything, answer the
// count), "h" (hold the connection open) and "d" (send bulkBytes, close).
func benchServer(b testing.TB) (port int) {
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var m [1]byte
				if _, err := io.ReadFull(c, m[:]); err != nil {
					return
				}
				switch m[0] {
				case 'e':
					c.Write(m[:])
				case 's':
					n, _ := io.Copy(io.Discard, c)
					fmt.Fprintf(c, "%d", n)
				case 'h':
					io.Copy(io.Discard, c) // hold open
				case 'd':
					// Download: bulkBytes to the client, then the close.
					buf := make([]byte, 256<<10)
					for n := 0; n < bulkBytes; n += len(buf) {
						if _, err := c.Write(buf); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func benchEngine(b *testing.B, host string, port int) (*Engine, *nsDialer) {
	if err := Supported(); err != nil {
		b.Skip(err)
	}
	pol, err := egress.NewPolicy(false, []string{host + ":" + strconv.Itoa(port)})
	if err != nil {
		b.Fatal(err)
	}
	// Records go nowhere here: the cost of the audit log is measured elsewhere.
	e, err := Start(Config{Policy: pol, Limits: egress.Limits{MaxConns: 1024}, Record: func(egress.Event) {}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e, newNSDialer(b, e.NetNS())
}

func roundTrip(c net.Conn) error {
	defer c.Close()
	if _, err := c.Write([]byte{'e'}); err != nil {
		return err
	}
	var m [1]byte
	_, err := io.ReadFull(c, m[:])
	return err
}

// BenchmarkEgressConnect: connect + one-byte round trip + close, through fledge vs direct.
func BenchmarkEgressConnect(b *testing.B) {
	port := benchServer(b)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp4", addr)
			if err != nil {
				b.Fatal(err)
			}
			if err := roundTrip(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, via := range []string{"loopback", "tun"} {
		b.Run("fledge-"+via, func(b *testing.B) {
			host := "127.0.0.1"
			if via == "tun" {
				host = hostAddr(b)
			}
			_, d := benchEngine(b, host, port)
			a := host + ":" + strconv.Itoa(port)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, err := d.dial(a)
				if err != nil {
					b.Fatal(err)
				}
				if err := roundTrip(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEgressThroughput: 64 MiB one way per op, through fledge vs direct.
func BenchmarkEgressThroughput(b *testing.B) {
	port := benchServer(b)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	const total = 64 << 20
	send := func(b *testing.B, c net.Conn) {
		buf := make([]byte, 256<<10)
		c.Write([]byte{'s'})
		for n := 0; n < total; n += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.(interface{ CloseWrite() error }).CloseWrite()
		got, _ := io.ReadAll(c)
		c.Close()
		if strings.TrimSpace(string(got)) != strconv.Itoa(total) {
			b.Fatalf("server got %q bytes", got)
		}
	}
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp4", addr)
			if err != nil {
				b.Fatal(err)
			}
			send(b, c)
		}
	})
	for _, via := range []string{"loopback", "tun"} {
		b.Run("fledge-"+via, func(b *testing.B) {
			host := "127.0.0.1"
			if via == "tun" {
				host = hostAddr(b)
			}
			_, d := benchEngine(b, host, port)
			a := host + ":" + strconv.Itoa(port)
			b.SetBytes(total)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, err := d.dial(a)
				if err != nil {
					b.Fatal(err)
				}
				send(b, c)
			}
		})
	}
}

// BenchmarkEgressOpenConns reports the host's RSS growth with 100 connections held open
// through fledge (metric rss-MiB/100conns).
func BenchmarkEgressOpenConns(b *testing.B) {
	port := benchServer(b)
	host := hostAddr(b)
	addr := host + ":" + strconv.Itoa(port)
	_, d := benchEngine(b, host, port)
	runtime.GC()
	before := rss()
	for i := 0; i < b.N; i++ {
		var cs []net.Conn
		for j := 0; j < 100; j++ {
			c, err := d.dial(addr)
			if err != nil {
				b.Fatal(err)
			}
			c.Write([]byte{'h'})
			cs = append(cs, c)
		}
		time.Sleep(100 * time.Millisecond)
		b.ReportMetric(float64(rss()-before)/(1<<20), "rss-MiB/100conns")
		for _, c := range cs {
			c.Close()
		}
	}
}

func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

// hostAddr is a non-loopback IPv4 address of this host: through fledge, a connection to it
// crosses the TUN device and the userspace stack (127.0.0.1 takes the namespace's loopback
// relay instead).
func hostAddr(b testing.TB) string {
	for a := range ownAddrs() {
		if a.Is4() && !a.IsLoopback() {
			return a.String()
		}
	}
	b.Skip("no non-loopback IPv4 address")
	return ""
}

// bulkBytes is what one bulk transfer moves.
const bulkBytes = 64 << 20

// upload sends bulkBytes on c and checks the server got them all.
func upload(c net.Conn) error {
	defer c.Close()
	buf := make([]byte, 256<<10)
	if _, err := c.Write([]byte{'s'}); err != nil {
		return err
	}
	for n := 0; n < bulkBytes; n += len(buf) {
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(io.LimitReader(c, 64))
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(got)) != strconv.Itoa(bulkBytes) {
		return fmt.Errorf("server got %q bytes, want %d", got, bulkBytes)
	}
	return nil
}

// download reads the server's bulkBytes from c and checks they all came.
func download(c net.Conn) error {
	defer c.Close()
	if _, err := c.Write([]byte{'d'}); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	n := 0
	for {
		k, err := c.Read(buf)
		n += k
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if n != bulkBytes {
		return fmt.Errorf("got %d bytes, want %d", n, bulkBytes)
	}
	return nil
}

// BenchmarkEgressVsDirect times each figure through fledge and directly, alternately in one
// loop (a load that comes and goes weighs on both), and reports what make bench prints
// against the goals:
//
//	connect-tun, connect-loopback: connect + one-byte round trip + close, medians of each
//	    side: fledge-ms/op, direct-ms/op and over-ms/op (fledge minus direct).
//	upload-tun, upload-loopback, download-tun, download-loopback: bulkBytes one way per
//	    side: fledge-Gbit/s, direct-Gbit/s and x-direct (fledge's rate over direct's).
//
// Each also reports fledge-cpu-ms/op and direct-cpu-ms/op: the CPU of the whole process
// (client, server and fledge) per operation of each side.
//
// tun crosses the TUN device and gVisor's stack (a host address that is not loopback);
// loopback is a granted host-loopback port relayed by a socket in the namespace.
func BenchmarkEgressVsDirect(b *testing.B) {
	port := benchServer(b)
	direct := "127.0.0.1:" + strconv.Itoa(port)
	dialDirect := func(string) (net.Conn, error) { return net.Dial("tcp4", direct) }
	for _, via := range []string{"tun", "loopback"} {
		setup := func(b *testing.B) (func(string) (net.Conn, error), string) {
			host := "127.0.0.1"
			if via == "tun" {
				host = hostAddr(b)
			}
			_, d := benchEngine(b, host, port)
			return d.dial, host + ":" + strconv.Itoa(port)
		}
		b.Run("connect-"+via, func(b *testing.B) {
			dialFledge, addr := setup(b)
			var fl, di []time.Duration
			var flCPU, diCPU time.Duration
			once := func(dial func(string) (net.Conn, error), into *[]time.Duration, cpu *time.Duration) {
				c0, t0 := cpuTime(), time.Now()
				c, err := dial(addr)
				if err != nil {
					b.Fatal(err)
				}
				if err := roundTrip(c); err != nil {
					b.Fatal(err)
				}
				*into = append(*into, time.Since(t0))
				*cpu += cpuTime() - c0
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				once(dialFledge, &fl, &flCPU)
				once(dialDirect, &di, &diCPU)
			}
			f, d := median(fl), median(di)
			b.ReportMetric(ms(f), "fledge-ms/op")
			b.ReportMetric(ms(d), "direct-ms/op")
			b.ReportMetric(ms(f-d), "over-ms/op")
			b.ReportMetric(ms(flCPU)/float64(b.N), "fledge-cpu-ms/op")
			b.ReportMetric(ms(diCPU)/float64(b.N), "direct-cpu-ms/op")
		})
		for _, dir := range []string{"upload", "download"} {
			move := upload
			if dir == "download" {
				move = download
			}
			b.Run(dir+"-"+via, func(b *testing.B) {
				dialFledge, addr := setup(b)
				var fl, di, flCPU, diCPU time.Duration
				once := func(dial func(string) (net.Conn, error), wall, cpu *time.Duration) {
					c0, t0 := cpuTime(), time.Now()
					c, err := dial(addr)
					if err != nil {
						b.Fatal(err)
					}
					if err := move(c); err != nil {
						b.Fatal(err)
					}
					*wall += time.Since(t0)
					*cpu += cpuTime() - c0
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					once(dialFledge, &fl, &flCPU)
					once(dialDirect, &di, &diCPU)
				}
				gbit := func(d time.Duration) float64 { return float64(b.N) * bulkBytes * 8 / d.Seconds() / 1e9 }
				b.ReportMetric(gbit(fl), "fledge-Gbit/s")
				b.ReportMetric(gbit(di), "direct-Gbit/s")
				b.ReportMetric(di.Seconds()/fl.Seconds(), "x-direct")
				b.ReportMetric(ms(flCPU)/float64(b.N), "fledge-cpu-ms/op")
				b.ReportMetric(ms(diCPU)/float64(b.N), "direct-cpu-ms/op")
			})
		}
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// cpuTime is the CPU this process has used, user and system, every thread: the client, the
// server and fledge's side of a transfer all run in it. It moves less with the load of
// other work on the machine than wall time does.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
