package netstack

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientHello is the first record Go's own TLS client sends for serverName.
func clientHello(t *testing.T, serverName string) []byte {
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
	_, err := readFull(b, hdr)
	require.NoError(t, err)
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	_, err = readFull(b, body)
	require.NoError(t, err)
	return append(hdr, body...)
}

func readFull(c net.Conn, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// A ClientHello spread over two records hides its server name from the first one: it is
// refused rather than let through unchecked (sniffName finds no name in it, which the
// engine used to read as "nothing to check").
func TestSplitClientHelloIsRefused(t *testing.T) {
	rec := clientHello(t, "api.example.org")
	require.Equal(t, "api.example.org", sniffName(rec), "one record: the name is read")
	assert.False(t, splitClientHello(rec))

	// The same handshake in two records, cut inside the extensions.
	hs := rec[5:]
	cut := len(hs) - 20
	first := append([]byte{0x16, rec[1], rec[2], byte(cut >> 8), byte(cut)}, hs[:cut]...)
	assert.Equal(t, "", sniffName(first), "the first record alone carries no readable name")
	assert.True(t, splitClientHello(first))

	assert.False(t, splitClientHello([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")))
	assert.False(t, splitClientHello([]byte{0x16, 3, 1}))
}
