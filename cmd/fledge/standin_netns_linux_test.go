// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// standIn stands in for a service on the internet: an HTTPS server (certificate from a
// test CA for the names it serves), a plain HTTP server, and a DNS server answering those
// names with its address, all in a network namespace of its own reached over a veth pair
// with TEST-NET-3 addresses (203.0.113.0/24): neither private, loopback nor the host's own,
// so fledge's engine treats the server as it treats one on the internet. fledge finds it by
// name through a resolv.conf naming the stand-in's DNS server, bound over /etc/resolv.conf
// in a private mount namespace of fledge's run (see run): the host's files are never
// changed. Everything is removed when the test ends.
type standIn struct {
	addr       netip.Addr // the namespace side, where the servers listen
	hostAddr   netip.Addr // the host side of the veth pair
	resolvConf string
	caFile     string // the test CA (PEM), what fledge's SSL_CERT_FILE names
	caPEM      []byte
	plainHits  atomic.Int64

	mu   sync.Mutex
	seen []seenRequest
}

// seenRequest is one request the HTTPS server got.
type seenRequest struct {
	Host, Method, Path, Auth string
}

func (s *standIn) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.seen...)
}

// newStandIn starts the stand-in serving names; tlsHandler answers its HTTPS requests
// (each recorded before), its plain HTTP server answers "plain-body". Root only; skips
// (fails with FLEDGE_REQUIRE_SANDBOX=1) without what it needs.
func newStandIn(t *testing.T, names []string, tlsHandler http.Handler) *standIn {
	t.Helper()
	if err := netstack.Supported(); err != nil {
		testutil.SkipUnlessSupported(t, false, "network by destination: "+err.Error())
	}
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "a network namespace and a private mount namespace need root")
	for _, p := range []string{"ip", "unshare", "mount"} {
		if _, err := exec.LookPath(p); err != nil {
			testutil.SkipUnlessSupported(t, false, p+" not installed")
		}
	}
	s := &standIn{}
	s.pickAddrs(t)
	for _, a := range []netip.Addr{s.addr, s.hostAddr} {
		require.False(t, egress.Special(a), "%s must not be special to fledge's engine", a)
	}

	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	ns, hostIf, nsIf := "fledge-si-"+id, "fsih"+id, "fsin"+id
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %v: %s", args, out)
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	ip("link", "set", nsIf, "netns", ns)
	ip("addr", "add", s.hostAddr.String()+"/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", s.addr.String()+"/30", "dev", nsIf)
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	var tlsLn, plainLn net.Listener
	var dnsConn net.PacketConn
	require.NoError(t, inNetNS(filepath.Join("/run/netns", ns), func() error {
		var err error
		if tlsLn, err = net.Listen("tcp", netip.AddrPortFrom(s.addr, 443).String()); err != nil {
			return err
		}
		if plainLn, err = net.Listen("tcp", netip.AddrPortFrom(s.addr, 80).String()); err != nil {
			return err
		}
		dnsConn, err = net.ListenPacket("udp", netip.AddrPortFrom(s.addr, 53).String())
		return err
	}))

	// The test CA, and the HTTPS server's certificate from it.
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fledge stand-in test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &leafKey.PublicKey, caKey)
	require.NoError(t, err)
	dir := t.TempDir()
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	s.caFile = filepath.Join(dir, "standin-ca.pem")
	require.NoError(t, os.WriteFile(s.caFile, s.caPEM, 0o644))
	s.resolvConf = filepath.Join(dir, "resolv.conf")
	require.NoError(t, os.WriteFile(s.resolvConf, []byte("nameserver "+s.addr.String()+"\noptions timeout:2 attempts:2\n"), 0o644))

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, seenRequest{Host: r.Host, Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization")})
		s.mu.Unlock()
		tlsHandler.ServeHTTP(w, r)
	}))
	_ = srv.Listener.Close()
	srv.Listener = tlsLn
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	plain := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.plainHits.Add(1)
		fmt.Fprint(w, "plain-body")
	})}
	go func() { _ = plain.Serve(plainLn) }()
	t.Cleanup(func() { _ = plain.Close() })

	answer := map[string]bool{}
	for _, n := range names {
		answer[dns.Fqdn(n)] = true
	}
	ds := &dns.Server{PacketConn: dnsConn, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if len(q.Question) != 1 || !answer[strings.ToLower(q.Question[0].Name)] {
			m.Rcode = dns.RcodeNameError
		} else if q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: s.addr.AsSlice()})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = ds.ActivateAndServe() }()
	t.Cleanup(func() { _ = ds.Shutdown() })
	return s
}

// pickAddrs picks a /30 of 203.0.113.0/24 no interface of the host has an address in
// (tests of other checkouts may run their stand-ins at the same time).
func (s *standIn) pickAddrs(t *testing.T) {
	t.Helper()
	used := map[byte]bool{}
	out, err := exec.Command("ip", "-4", "-o", "addr", "show").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, f := range strings.Fields(string(out)) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() && p.Addr().As4()[2] == 113 &&
			p.Addr().As4()[0] == 203 && p.Addr().As4()[1] == 0 {
			used[p.Addr().As4()[3]&^3] = true
		}
	}
	b := make([]byte, 1)
	for range 64 {
		_, _ = rand.Read(b)
		base := (b[0] & 0xfc) % 252
		if base == 0 || used[base] {
			continue
		}
		s.hostAddr = netip.AddrFrom4([4]byte{203, 0, 113, base + 1})
		s.addr = netip.AddrFrom4([4]byte{203, 0, 113, base + 2})
		return
	}
	t.Fatal("no free /30 in 203.0.113.0/24")
}

// inNetNS runs f on a thread that joined the network namespace at path (sockets f makes
// belong to it). The thread stays locked and ends with its goroutine: no other goroutine
// ever runs in that namespace.
func inNetNS(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// run runs `fledge args...` in e's world as e.run does, in a private mount namespace
// whose /etc/resolv.conf names the stand-in's DNS server, trusting the stand-in's CA
// (SSL_CERT_FILE, which fledge's own TLS to a destination honours as Go does).
func (s *standIn) run(t *testing.T, e *ptyEnv, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" /etc/resolv.conf && exec "$@"`, s.resolvConf, e.fledge}, args...)...)
	cmd.Env = append(append([]string{}, e.env...), "SSL_CERT_FILE="+s.caFile)
	cmd.Dir = e.work
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("unshare ... fledge %v: %v\n%s", args, err, out)
	}
	return string(out), 0
}
