// SPDX-License-Identifier: MIT

package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRequestHeadDecidesAsAServerRoutes(t *testing.T) {
	pad := strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 17)
	for _, c := range []struct {
		in   string
		host string
		port uint16
		form TargetForm
	}{
		{"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\n", "svc.test", 0, OriginForm},
		{"GET / HTTP/1.1\r\nHOST:   SVC.Test.:8080  \r\n\r\n", "svc.test", 0, OriginForm},
		{"GET http://other.test/ HTTP/1.1\r\nHost: svc.test\r\n\r\n", "other.test", 80, AbsoluteForm},
		{"GET https://other.test:8443/x?y HTTP/1.1\r\nHost: svc.test\r\n\r\n", "other.test", 8443, AbsoluteForm},
		{"GET HTTPS://other.test HTTP/1.1\r\n\r\n", "other.test", 443, AbsoluteForm},
		{"CONNECT other.test:443 HTTP/1.1\r\nHost: svc.test\r\n\r\n", "other.test", 443, AuthorityForm},
		{"CONNECT 10.1.2.3:22 HTTP/1.1\r\n\r\n", "10.1.2.3", 22, AuthorityForm},
		{"FOO / HTTP/1.1\r\nHost: other.test\r\n\r\n", "other.test", 0, OriginForm},
		{"\r\n\r\n\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n", "other.test", 0, OriginForm},
		{"GET / HTTP/1.1\r\n" + pad + "Host: other.test\r\n\r\n", "other.test", 0, OriginForm},
		{"OPTIONS * HTTP/1.1\r\nHost: svc.test\r\n\r\n", "svc.test", 0, AsteriskForm},
		{"GET / HTTP/1.0\r\n\r\n", "", 0, OriginForm},
		{"GET / HTTP/1.1\nHost: svc.test\n\n", "svc.test", 0, OriginForm},
	} {
		r, err := ParseRequestHead([]byte(c.in), 0)
		require.NoError(t, err, "%q", c.in)
		assert.Equal(t, c.host, r.Host, "%q", c.in)
		assert.Equal(t, c.port, r.Port, "%q", c.in)
		assert.Equal(t, c.form, r.Form, "%q", c.in)
		assert.Equal(t, len(c.in), r.Consumed, "%q", c.in)
	}
}

func TestParseRequestHeadRefusesWhatItCannotDecide(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n", // 1.1 without Host
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\n X-Folded: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\rX: y\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +3\r\n\r\n",
		"GET http://user@other.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET ftp://other.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"CONNECT other.test HTTP/1.1\r\n\r\n",
		"GET  / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"GET / http/1.1\r\nHost: a.test\r\n\r\n",
		"GET / HTTP/1.2\r\nHost: a.test\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET /index.html\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n\x00",
		"GET / HTTP/1.1\r\nHost: a%2etest\r\n\r\n",
		"GET / HTTP/1.1\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 70) + "Host: a.test\r\n\r\n",
	} {
		r, err := ParseRequestHead([]byte(in), 0)
		if in == "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n\x00" {
			require.NoError(t, err)
			assert.Equal(t, "::1", r.Host, "an IPv6 Host is an address, decided by address")
			continue
		}
		assert.True(t, errors.Is(err, ErrBadRequest), "%q: got %v", in, err)
	}
}

func TestSniffHTTPLeavesOtherProtocolsAlone(t *testing.T) {
	for _, in := range []string{
		"\x00\x00\x00\x08\x04\xd2\x16\x2f", // PostgreSQL SSLRequest
		"PING\r\n",
		"*1\r\n$4\r\nPING\r\n",
		"EHLO client.test\r\n",
		"MAIL FROM:<a@b> SIZE=10\r\n",
		"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
		"get key\r\n",
	} {
		assert.Equal(t, ErrNotHTTP, SniffHTTP([]byte(in)), "%q", in)
		_, err := ParseRequestHead([]byte(in), 0)
		assert.Equal(t, ErrNotHTTP, err, "%q", in)
	}
	for _, in := range []string{"GE", "GET / HT", "\r\n", "FOO /x", "\r", "\r\r\n\rGET"} {
		assert.Equal(t, ErrIncomplete, SniffHTTP([]byte(in)), "%q", in)
	}
	// Lines Node's parser reads as requests are HTTP, refused when not HTTP/1.0 or 1.1.
	for _, in := range []string{
		"GET / RTSP/1.0\r\n", "SOURCE / ICE/1.0\r\n", "POST /\r\n", "GET http://other.test/\r\n",
		"OPTIONS *\r\n", "CONNECT other.test:80\r\n", "\r\r\nGET / HTTP/1.1\r\n",
	} {
		assert.NoError(t, SniffHTTP([]byte(in)), "%q", in)
		_, err := ParseRequestHead([]byte(in+"Host: svc.test\r\n\r\n"), 0)
		assert.True(t, errors.Is(err, ErrBadRequest), "%q: %v", in, err)
	}
}

func TestRequestHeadForwardsTheDecidedHost(t *testing.T) {
	r, err := ParseRequestHead([]byte("GET http://other.test:81/p HTTP/1.1\r\nhost: svc.test\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\nX-A: 1\r\n\r\n"), 0)
	require.NoError(t, err)
	assert.Equal(t, "GET http://other.test:81/p HTTP/1.1\r\nHost: other.test:81\r\nX-A: 1\r\n\r\n", string(r.Head("conn.test")))
	r, err = ParseRequestHead([]byte("GET / HTTP/1.0\r\nX-A: 1\r\n\r\n"), 0)
	require.NoError(t, err)
	assert.Equal(t, "GET / HTTP/1.0\r\nHost: conn.test\r\nX-A: 1\r\n\r\n", string(r.Head("conn.test")))
	r, err = ParseRequestHead([]byte("GET /ws HTTP/1.1\r\nHost: svc.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"), 0)
	require.NoError(t, err)
	assert.True(t, r.Upgrade)
	assert.Equal(t, "GET /ws HTTP/1.1\r\nHost: svc.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", string(r.Head("")))
}

func TestCopyChunkedReframes(t *testing.T) {
	var out bytes.Buffer
	src := bufio.NewReader(strings.NewReader("5;ext=1\r\nhello\r\nA\r\n0123456789\n0\r\nX-T: 1\r\n\r\nNEXT"))
	_, err := CopyChunked(&out, src)
	require.NoError(t, err)
	assert.Equal(t, "5\r\nhello\r\na\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n", out.String())
	rest, _ := src.ReadString(0)
	assert.Equal(t, "NEXT", rest, "the next request starts where the body ended")

	for _, in := range []string{"5\r\nhelloX\r\n0\r\n\r\n", "g\r\n", "5 \r\nhello\r\n0\r\n\r\n", "-1\r\n", "0\r\nbad trailer\r\n\r\n", "1234567890abcdef\r\n"} {
		_, err := CopyChunked(&bytes.Buffer{}, bufio.NewReader(strings.NewReader(in)))
		assert.True(t, errors.Is(err, ErrBadRequest), "%q: %v", in, err)
	}
}

// Re-framed chunks are gathered into few writes, yet what has arrived is sent before
// fledge waits for more: a streamed body is not held back.
func TestCopyChunkedSendsBeforeWaiting(t *testing.T) {
	pr, pw := io.Pipe()
	got := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		_, err := CopyChunked(chanWriter(got), bufio.NewReader(pr))
		done <- err
	}()
	go pw.Write([]byte("1\r\na\r\n1\r\nb\r\n"))
	var first string
	for !strings.Contains(first, "b\r\n") {
		select {
		case s := <-got:
			first += s
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing sent while waiting for the rest of the body: %q", first)
		}
	}
	assert.Equal(t, "1\r\na\r\n1\r\nb\r\n", first)
	go pw.Write([]byte("0\r\n\r\n"))
	require.NoError(t, <-done)
	assert.Equal(t, "0\r\n\r\n", <-got)
}

type chanWriter chan string

func (c chanWriter) Write(p []byte) (int, error) { c <- string(p); return len(p), nil }

// goRoutes is where Go's net/http server routes the request at the start of b (leading
// empty lines skipped, as RFC 9112 has servers do): the host of r.Host, ok false when Go
// refuses the request.
func goRoutes(b []byte) (string, bool) {
	b = b[skipEmptyLines(b):]
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return "", false
	}
	h := req.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return h, true
}

// FuzzRequestHead is the differential oracle of the HTTP decision: for any bytes, the
// name fledge decides is the one Go's net/http server routes to (its proxy handling of
// absolute form and CONNECT included), or fledge refuses. "Not HTTP" must be bytes Go
// does not take as a request either.
func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: svc.test\r\n\r\n",
		"GET http://other.test/ HTTP/1.1\r\nHost: svc.test\r\n\r\n",
		"CONNECT other.test:443 HTTP/1.1\r\nHost: svc.test\r\n\r\n",
		"\r\nFOO / HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a.b:1\r\n\r\n",
		"EHLO x\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequestHead(b, 0)
		goHost, goOK := goRoutes(b)
		switch {
		case err == ErrNotHTTP:
			if goOK {
				t.Fatalf("fledge: not HTTP; Go routes it to %q", goHost)
			}
		case err != nil:
			// Refused or incomplete: nothing passes.
		case !goOK:
			t.Fatalf("fledge decided %q; Go refuses the request", r.Host)
		default:
			want := strings.ToLower(strings.TrimSuffix(goHost, "."))
			if r.Host == "" && want == "" {
				return // HTTP/1.0 without Host: both take the connection's name
			}
			if r.Host != want {
				if a, perr := parseAddrLoose(want); perr == nil && a == r.Host {
					return
				}
				t.Fatalf("fledge decided %q; Go routes to %q", r.Host, goHost)
			}
			// What fledge forwards is read by Go the same way.
			if h2, ok := goRoutes(r.Head("conn.test")); !ok || !strings.EqualFold(strings.TrimSuffix(h2, "."), r.Host) && r.Host != "" {
				t.Fatalf("the forwarded head routes to %q (ok %v), decided %q", h2, ok, r.Host)
			}
		}
	})
}

func parseAddrLoose(s string) (string, error) {
	r := &Request{}
	if err := r.setHost(s); err != nil {
		return "", err
	}
	return r.Host, nil
}
