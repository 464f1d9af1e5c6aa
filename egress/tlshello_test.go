// SPDX-License-Identifier: MIT

package egress

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientHello is the first record Go's own TLS client sends for serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_ = c.Handshake()
	}()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	_, err := io.ReadFull(b, hdr)
	require.NoError(t, err)
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	_, err = io.ReadFull(b, body)
	require.NoError(t, err)
	return append(hdr, body...)
}

func TestClientHelloName(t *testing.T) {
	rec := clientHello(t, "api.example.org")
	name, err := ClientHelloName(rec)
	require.NoError(t, err)
	assert.Equal(t, "api.example.org", name)

	none := clientHello(t, "")
	name, err = ClientHelloName(none)
	require.NoError(t, err, "a hello without a name is decided: no name")
	assert.Equal(t, "", name)

	// The same handshake in two records, cut inside the extensions: the first record
	// alone carries no readable name, so it is refused rather than let through unchecked.
	hs := rec[5:]
	cut := len(hs) - 20
	first := append([]byte{0x16, rec[1], rec[2], byte(cut >> 8), byte(cut)}, hs[:cut]...)
	_, err = ClientHelloName(first)
	assert.True(t, errors.Is(err, ErrBadRequest), "split hello: %v", err)

	// Trailing bytes after the hello in its record, and a truncated record.
	extra := append(append([]byte{}, rec...), 1, 2, 3)
	extra[3], extra[4] = byte((len(extra)-5)>>8), byte(len(extra)-5)
	_, err = ClientHelloName(extra)
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = ClientHelloName(rec[:len(rec)-1])
	assert.ErrorIs(t, err, ErrBadRequest)
	_, err = ClientHelloName([]byte("GET / HTTP/1.1\r\n\r\n"))
	assert.ErrorIs(t, err, ErrBadRequest)
}

// helloServerName is what Go's TLS server reads as the server name of rec, ok false
// when it refuses the hello.
func helloServerName(rec []byte) (string, bool) {
	a, b := net.Pipe()
	defer a.Close()
	got := make(chan string, 1)
	srv := tls.Server(b, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		got <- h.ServerName
		return nil, errors.New("stop here")
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.SetDeadline(time.Now().Add(2 * time.Second))
		_ = srv.Handshake()
		b.Close()
	}()
	go func() { _, _ = a.Write(rec); _, _ = io.Copy(io.Discard, a) }()
	<-done
	select {
	case n := <-got:
		return n, true
	default:
		return "", false
	}
}

// FuzzClientHelloName: for any first record, the name fledge decides is the one Go's TLS
// server would read, or fledge refuses. "No name" must mean Go sees none either.
func FuzzClientHelloName(f *testing.F) {
	f.Add(clientHello(f, "api.example.org"))
	f.Add(clientHello(f, ""))
	f.Add(clientHello(f, "a.b"))
	f.Fuzz(func(t *testing.T, rec []byte) {
		if len(rec) < 5 || rec[0] != 0x16 || HelloRecordLen(rec) != len(rec) {
			return
		}
		name, err := ClientHelloName(rec)
		if err != nil {
			return // refused: always safe
		}
		goName, ok := helloServerName(rec)
		if !ok {
			// Go refused the hello (for a reason past the name, such as its cipher
			// suites): the name fledge read must then be one Go would have read had it
			// gone on; nothing to compare.
			return
		}
		if goName != name {
			t.Fatalf("fledge decided %q, Go's server reads %q", name, goName)
		}
	})
}
