// SPDX-License-Identifier: MIT

package netstack

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// proxyFixture is an engine with the session's proxy: api.test (and ssrf.test, which
// resolves to a private address) granted on the test server's port, whose host-side
// address the Dial hook sends to the test server.
type proxyFixture struct {
	p       *Proxy
	rec     *recorder
	port    uint16
	dials   atomic.Int64
	hits    atomic.Int64
	gotAuth atomic.Value // the last request's Proxy-Authorization, as the destination saw it
	hosts   chan string
}

func newProxyFixture(t *testing.T) *proxyFixture {
	t.Helper()
	f := &proxyFixture{hosts: make(chan string, 16)}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		f.gotAuth.Store(r.Header.Get("Proxy-Authorization"))
		f.hosts <- r.Host
		fmt.Fprint(w, "api-body")
	}))
	t.Cleanup(s.Close)
	up := s.Listener.Addr().String()
	f.port = uint16(s.Listener.Addr().(*net.TCPAddr).Port)
	pol, err := egress.NewPolicy(false, []string{fmt.Sprintf("api.test:%d", f.port), fmt.Sprintf("ssrf.test:%d", f.port), fmt.Sprintf("other.test:%d", f.port)})
	require.NoError(t, err)
	f.rec = &recorder{}
	n := &names{m: map[string]string{"api.test": "192.0.2.10", "ssrf.test": "10.0.0.1", "other.test": "192.0.2.20"}}
	e, err := NewShared(Config{Policy: pol, Record: f.rec.add, Resolve: n.resolve,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			f.dials.Add(1)
			if addr != fmt.Sprintf("192.0.2.10:%d", f.port) {
				return nil, fmt.Errorf("the test dials only api.test, not %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, up)
		}})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	f.p, err = e.StartProxy()
	require.NoError(t, err)
	return f
}

func (f *proxyFixture) addr() string { return fmt.Sprintf("127.0.0.1:%d", f.p.Port()) }

func (f *proxyFixture) auth() string {
	u, _ := url.Parse(f.p.URL("http"))
	pw, _ := u.User.Password()
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
}

// The proxy decides as the namespace does, through the same connect: a granted name
// through plain HTTP, CONNECT and SOCKS5 (name resolved by fledge); an ungranted port, a
// name resolving to a private address, refused and recorded; the proxy's credential never
// reaches the destination.
func TestProxyDecidesAsTheNamespace(t *testing.T) {
	f := newProxyFixture(t)
	pu, err := url.Parse(f.p.URL("http"))
	require.NoError(t, err)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	get := func(u string) (int, string) {
		r, err := cl.Get(u)
		require.NoError(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	code, body := get(fmt.Sprintf("http://api.test:%d/x", f.port))
	assert.Equal(t, 200, code)
	assert.Equal(t, "api-body", body)
	assert.Equal(t, "", f.gotAuth.Load(), "the proxy credential was passed on to the destination")
	assert.NotNil(t, f.rec.await(egress.EventConnect, "api.test", true, egress.ReasonGranted))

	code, _ = get(fmt.Sprintf("http://api.test:%d/x", f.port+1))
	assert.Equal(t, 403, code)
	assert.NotNil(t, f.rec.await(egress.EventConnect, "api.test", false, egress.ReasonNotGranted))
	code, _ = get(fmt.Sprintf("http://ssrf.test:%d/x", f.port))
	assert.Equal(t, 403, code)
	assert.NotNil(t, f.rec.await(egress.EventConnect, "ssrf.test", false, egress.ReasonPrivate))

	// CONNECT, then a request inside the tunnel.
	c, err := net.Dial("tcp", f.addr())
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\nProxy-Authorization: %s\r\n\r\n", f.port, f.port, f.auth())
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	assert.Equal(t, "HTTP/1.1 200 Connection established", strings.TrimSpace(line))
	_, _ = br.ReadString('\n')
	fmt.Fprintf(c, "GET /in-tunnel HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", f.port)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)

	// SOCKS5, by name.
	s, err := net.Dial("tcp", f.addr())
	require.NoError(t, err)
	defer s.Close()
	_, _ = s.Write([]byte{5, 1, 2})
	var m [2]byte
	_, err = io.ReadFull(s, m[:])
	require.NoError(t, err)
	pw, _ := pu.User.Password()
	_, _ = s.Write(append(append(append([]byte{1, byte(len(ProxyUser))}, ProxyUser...), byte(len(pw))), pw...))
	_, err = io.ReadFull(s, m[:])
	require.NoError(t, err)
	require.Equal(t, []byte{1, 0}, m[:])
	req := append([]byte{5, 1, 0, 3, byte(len("api.test"))}, "api.test"...)
	req = binary.BigEndian.AppendUint16(req, f.port)
	_, _ = s.Write(req)
	var rep [10]byte
	_, err = io.ReadFull(s, rep[:])
	require.NoError(t, err)
	require.Equal(t, byte(0), rep[1], "SOCKS5 CONNECT to a granted name")
	fmt.Fprintf(s, "GET /socks HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", f.port)
	resp, err = http.ReadResponse(bufio.NewReader(s), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
}

// A plain HTTP proxy connection carries requests for the destination it was decided for
// only: a later request on it naming another host (granted too) would go to the first
// destination all the same, so the connection ends there and it is recorded.
func TestProxyAttackSecondHostOnOneConnection(t *testing.T) {
	f := newProxyFixture(t)
	c, err := net.Dial("tcp", f.addr())
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://api.test:%d/one HTTP/1.1\r\nHost: api.test:%d\r\nProxy-Authorization: %s\r\n\r\n", f.port, f.port, f.auth())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	fmt.Fprintf(c, "GET http://other.test:%d/two HTTP/1.1\r\nHost: other.test:%d\r\nProxy-Authorization: %s\r\n\r\n", f.port, f.port, f.auth())
	_, err = http.ReadResponse(br, nil)
	assert.Error(t, err, "the second request was answered")
	assert.Equal(t, int64(1), f.hits.Load(), "the destination got the request for another host")
	assert.NotNil(t, f.rec.await(egress.EventConnect, "other.test", false, egress.ReasonNameMismatch))
}

// Without the session's credential (none, a wrong one, SOCKS5 without a password or with
// a wrong one) nothing is decided or dialled, and the attempt is recorded.
func TestProxyAttackNoCredential(t *testing.T) {
	f := newProxyFixture(t)
	for _, h := range []string{"", "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("fledge:guess")) + "\r\n"} {
		c, err := net.Dial("tcp", f.addr())
		require.NoError(t, err)
		fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test\r\n%s\r\n", f.port, h)
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		assert.Equal(t, "HTTP/1.1 407 Proxy Authentication Required", strings.TrimSpace(line))
		c, err = net.Dial("tcp", f.addr())
		require.NoError(t, err)
		fmt.Fprintf(c, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n%s\r\n", f.port, h)
		line, _ = bufio.NewReader(c).ReadString('\n')
		c.Close()
		assert.Equal(t, "HTTP/1.1 407 Proxy Authentication Required", strings.TrimSpace(line))
	}
	s, err := net.Dial("tcp", f.addr())
	require.NoError(t, err)
	_, _ = s.Write([]byte{5, 1, 0}) // "no authentication" only
	var m [2]byte
	_, _ = io.ReadFull(s, m[:])
	s.Close()
	assert.Equal(t, []byte{5, 0xff}, m[:])
	s, err = net.Dial("tcp", f.addr())
	require.NoError(t, err)
	_, _ = s.Write([]byte{5, 1, 2})
	_, _ = io.ReadFull(s, m[:])
	_, _ = s.Write(append([]byte{1, byte(len(ProxyUser))}, append([]byte(ProxyUser), append([]byte{5}, "guess"...)...)...))
	_, _ = io.ReadFull(s, m[:])
	s.Close()
	assert.Equal(t, []byte{1, 1}, m[:], "SOCKS5 with a wrong password")
	assert.Zero(t, f.dials.Load(), "a connection without the credential was dialled")
	assert.Zero(t, f.hits.Load())
	assert.NotNil(t, f.rec.await(egress.EventConnect, "", false, ReasonProxyAuth))
}

// Another user's program is refused at once, before it can send anything (holding no slot
// of the connections still to show their credential), even with the right credential.
func TestProxyAttackOtherUser(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "running a client as another user needs root")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "setpriv not installed")
	}
	f := newProxyFixture(t)
	script := `import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
try:
    s.sendall(sys.argv[2].encode()); print(repr(s.recv(100)))
except OSError as e:
    print(type(e).__name__)
`
	req := fmt.Sprintf("CONNECT api.test:%d HTTP/1.1\r\nHost: api.test\r\nProxy-Authorization: %s\r\n\r\n", f.port, f.auth())
	out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script,
		fmt.Sprint(f.p.Port()), req).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.NotContains(t, string(out), "200", "another user's program got a tunnel: %s", out)
	assert.NotContains(t, string(out), "407", "another user's program got as far as the credential: %s", out)
	assert.Zero(t, f.dials.Load())
	assert.NotNil(t, f.rec.await(egress.EventConnect, "", false, ReasonProxyAuth))
}
