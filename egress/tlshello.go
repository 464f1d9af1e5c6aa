// SPDX-License-Identifier: MIT

package egress

import "strings"

// MaxHelloRecord bounds the first TLS record fledge reads (a record's plaintext is at most
// 2^14 bytes).
const MaxHelloRecord = 5 + 16384

// HelloRecordLen says how many bytes the TLS record starting b needs in all (b[0] is 0x16,
// a handshake record), once its 5-byte header is there; 0 while it is not.
func HelloRecordLen(b []byte) int {
	if len(b) < 5 {
		return 0
	}
	return 5 + (int(b[3])<<8 | int(b[4]))
}

// ClientHelloName returns the server name a TLS ClientHello asks for, "" when it asks for
// none, read the way Go's TLS server reads it. rec is the whole first record. A hello
// fledge cannot read as the server would is a *RequestError: spread over several records
// (its name may be in a later one), followed by other handshake bytes in its record, with
// an extension twice, two host names, an empty or dotted name.
func ClientHelloName(rec []byte) (string, error) {
	if len(rec) < 5 || rec[0] != 0x16 {
		return "", badRequest("not a TLS handshake record")
	}
	if n := HelloRecordLen(rec); n > MaxHelloRecord || n != len(rec) {
		return "", badRequest("a TLS record of the wrong length")
	}
	p := rec[5:]
	if len(p) < 4 || p[0] != 1 {
		return "", badRequest("the first TLS handshake message is not a ClientHello")
	}
	hsLen := int(p[1])<<16 | int(p[2])<<8 | int(p[3])
	if 4+hsLen > len(p) {
		return "", badRequest("a ClientHello spread over several TLS records")
	}
	if 4+hsLen < len(p) {
		return "", badRequest("other handshake bytes after the ClientHello in its record")
	}
	p = p[4:]
	bad := func() (string, error) { return "", badRequest("a malformed ClientHello") }
	take := func(n int) ([]byte, bool) {
		if n < 0 || len(p) < n {
			return nil, false
		}
		v := p[:n]
		p = p[n:]
		return v, true
	}
	u8 := func() (int, bool) {
		v, ok := take(1)
		if !ok {
			return 0, false
		}
		return int(v[0]), true
	}
	u16 := func() (int, bool) {
		v, ok := take(2)
		if !ok {
			return 0, false
		}
		return int(v[0])<<8 | int(v[1]), true
	}
	if _, ok := take(2 + 32); !ok { // version, random
		return bad()
	}
	if n, ok := u8(); !ok || n > 32 {
		return bad()
	} else if _, ok := take(n); !ok { // session id
		return bad()
	}
	if n, ok := u16(); !ok || n%2 != 0 {
		return bad()
	} else if _, ok := take(n); !ok { // cipher suites
		return bad()
	}
	if n, ok := u8(); !ok || n < 1 {
		return bad()
	} else if _, ok := take(n); !ok { // compression methods
		return bad()
	}
	if len(p) == 0 {
		return "", nil // no extensions: no name
	}
	extLen, ok := u16()
	if !ok || extLen != len(p) {
		return bad()
	}
	seen := map[int]bool{}
	name := ""
	for len(p) > 0 {
		typ, ok1 := u16()
		n, ok2 := u16()
		body, ok3 := take(n)
		if !ok1 || !ok2 || !ok3 {
			return bad()
		}
		if seen[typ] {
			return "", badRequest("a ClientHello with an extension twice")
		}
		seen[typ] = true
		if typ != 0 {
			continue
		}
		if len(body) < 2 || int(body[0])<<8|int(body[1]) != len(body)-2 || len(body) == 2 {
			return bad()
		}
		list := body[2:]
		for len(list) > 0 {
			if len(list) < 3 {
				return bad()
			}
			nt, l := list[0], int(list[1])<<8|int(list[2])
			list = list[3:]
			if l == 0 || len(list) < l {
				return bad()
			}
			v := string(list[:l])
			list = list[l:]
			if nt != 0 {
				continue
			}
			if name != "" {
				return "", badRequest("a ClientHello with two host names")
			}
			if strings.HasSuffix(v, ".") {
				return "", badRequest("a server name with a trailing dot")
			}
			name = v
		}
	}
	return name, nil
}
