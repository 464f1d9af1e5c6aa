//go:build linux

package netstack

import (
	"bytes"
	"strings"
)

// maxSniff bounds the bytes held back from the destination while fledge reads the name a
// connection's first message carries (a TLS ClientHello record is at most 16 KiB + 5).
const maxSniff = 16384 + 5

var httpMethods = []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// sniffKind says what the first bytes of a connection look like and how many bytes are
// needed to read its name: 0 for "not TLS or HTTP, nothing to check", -1 for "HTTP, up to
// the end of the headers", n for "TLS, n bytes in all".
func sniffKind(b []byte) int {
	if len(b) >= 1 && b[0] == 0x16 {
		if len(b) < 5 {
			return 5
		}
		return 5 + (int(b[3])<<8 | int(b[4]))
	}
	for _, m := range httpMethods {
		if len(b) >= len(m) && string(b[:len(m)]) == m || len(b) < len(m) && strings.HasPrefix(m, string(b)) {
			return -1
		}
	}
	return 0
}

// complete reports whether b holds what sniffKind asked for.
func complete(b []byte) bool {
	switch k := sniffKind(b); {
	case k == 0:
		return true
	case k == -1:
		return bytes.Contains(b, []byte("\r\n\r\n"))
	default:
		return len(b) >= k
	}
}

// sniffName returns the host name a TLS ClientHello (SNI) or an HTTP/1 request (Host
// header) carries, "" when it carries none or cannot be parsed.
func sniffName(b []byte) string {
	if len(b) > 0 && b[0] == 0x16 {
		return sni(b)
	}
	if sniffKind(b) == -1 {
		return httpHost(b)
	}
	return ""
}

func httpHost(b []byte) string {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		end = len(b)
	}
	lines := strings.Split(string(b[:end]), "\r\n")
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			h := strings.TrimSpace(v)
			if strings.HasPrefix(h, "[") {
				if i := strings.Index(h, "]"); i > 0 {
					return h[1:i]
				}
			}
			if i := strings.LastIndex(h, ":"); i >= 0 {
				h = h[:i]
			}
			return h
		}
	}
	return ""
}

// splitClientHello reports whether b starts a TLS ClientHello that does not fit its first
// record (the handshake spread over several records). Its server name cannot be read from
// the first record, and real clients send it in one record, so a split one is how a
// program would slip a second name past the check: refused.
func splitClientHello(b []byte) bool {
	if len(b) < 9 || b[0] != 0x16 || b[5] != 1 {
		return false
	}
	recLen := int(b[3])<<8 | int(b[4])
	hsLen := int(b[6])<<16 | int(b[7])<<8 | int(b[8])
	return 4+hsLen > recLen
}

// sni parses the server_name extension of a ClientHello in one TLS record.
func sni(b []byte) string {
	if len(b) < 5+4 || b[5] != 1 { // handshake type client_hello
		return ""
	}
	p := b[5+4:]
	skip := func(n int) bool {
		if len(p) < n {
			return false
		}
		p = p[n:]
		return true
	}
	u8 := func() (int, bool) {
		if len(p) < 1 {
			return 0, false
		}
		v := int(p[0])
		p = p[1:]
		return v, true
	}
	u16 := func() (int, bool) {
		if len(p) < 2 {
			return 0, false
		}
		v := int(p[0])<<8 | int(p[1])
		p = p[2:]
		return v, true
	}
	if !skip(2 + 32) { // version, random
		return ""
	}
	if n, ok := u8(); !ok || !skip(n) { // session id
		return ""
	}
	if n, ok := u16(); !ok || !skip(n) { // cipher suites
		return ""
	}
	if n, ok := u8(); !ok || !skip(n) { // compression
		return ""
	}
	extLen, ok := u16()
	if !ok || len(p) < extLen {
		return ""
	}
	p = p[:extLen]
	for len(p) >= 4 {
		typ, _ := u16()
		n, _ := u16()
		if len(p) < n {
			return ""
		}
		body := p[:n]
		p = p[n:]
		if typ != 0 {
			continue
		}
		if len(body) < 2 {
			return ""
		}
		body = body[2:]
		for len(body) >= 3 {
			nt := body[0]
			l := int(body[1])<<8 | int(body[2])
			body = body[3:]
			if len(body) < l {
				return ""
			}
			if nt == 0 {
				return string(body[:l])
			}
			body = body[l:]
		}
	}
	return ""
}
