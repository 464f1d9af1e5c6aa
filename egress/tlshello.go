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
	body, err := clientHelloBody(rec)
	if err != nil {
		return "", err
	}
	r := &helloReader{p: body}
	if !r.skipHelloFixed() {
		return "", errMalformedHello()
	}
	if len(r.p) == 0 {
		return "", nil // no extensions: no name
	}
	extLen, ok := r.u16()
	if !ok || extLen != len(r.p) {
		return "", errMalformedHello()
	}
	return r.extensionsName()
}

// clientHelloBody checks the record and handshake framing and returns the ClientHello
// message body; these checks have their own texts because they tell a person why a
// well-formed hello was still refused.
func clientHelloBody(rec []byte) ([]byte, error) {
	if len(rec) < 5 || rec[0] != 0x16 {
		return nil, badRequest("not a TLS handshake record")
	}
	if n := HelloRecordLen(rec); n > MaxHelloRecord || n != len(rec) {
		return nil, badRequest("a TLS record of the wrong length")
	}
	p := rec[5:]
	if len(p) < 4 || p[0] != 1 {
		return nil, badRequest("the first TLS handshake message is not a ClientHello")
	}
	hsLen := int(p[1])<<16 | int(p[2])<<8 | int(p[3])
	if 4+hsLen > len(p) {
		return nil, badRequest("a ClientHello spread over several TLS records")
	}
	if 4+hsLen < len(p) {
		return nil, badRequest("other handshake bytes after the ClientHello in its record")
	}
	return p[4:], nil
}

// errMalformedHello is the one error for every structural fault inside the hello.
func errMalformedHello() error { return badRequest("a malformed ClientHello") }

// helloReader consumes a ClientHello body front to back; every read is bounds-checked and
// reports false rather than panicking on a short input.
type helloReader struct{ p []byte }

// take consumes n bytes.
func (r *helloReader) take(n int) ([]byte, bool) {
	if n < 0 || len(r.p) < n {
		return nil, false
	}
	v := r.p[:n]
	r.p = r.p[n:]
	return v, true
}

// u8 consumes a one-byte length.
func (r *helloReader) u8() (int, bool) {
	v, ok := r.take(1)
	if !ok {
		return 0, false
	}
	return int(v[0]), true
}

// u16 consumes a big-endian two-byte length.
func (r *helloReader) u16() (int, bool) {
	v, ok := r.take(2)
	if !ok {
		return 0, false
	}
	return int(v[0])<<8 | int(v[1]), true
}

// skipHelloFixed consumes the fields before the extensions: version, random, session id,
// cipher suites and compression methods, checking the bounds Go's server checks.
func (r *helloReader) skipHelloFixed() bool {
	if _, ok := r.take(2 + 32); !ok { // version, random
		return false
	}
	if n, ok := r.u8(); !ok || n > 32 {
		return false
	} else if _, ok := r.take(n); !ok { // session id
		return false
	}
	if n, ok := r.u16(); !ok || n%2 != 0 {
		return false
	} else if _, ok := r.take(n); !ok { // cipher suites
		return false
	}
	if n, ok := r.u8(); !ok || n < 1 {
		return false
	} else if _, ok := r.take(n); !ok { // compression methods
		return false
	}
	return true
}

// extensionsName walks the extensions to the end, refusing one seen twice, and returns the
// host name of the server_name extension (type 0), if any.
func (r *helloReader) extensionsName() (string, error) {
	seen := map[int]bool{}
	name := ""
	for len(r.p) > 0 {
		typ, ok1 := r.u16()
		n, ok2 := r.u16()
		body, ok3 := r.take(n)
		if !ok1 || !ok2 || !ok3 {
			return "", errMalformedHello()
		}
		if seen[typ] {
			return "", badRequest("a ClientHello with an extension twice")
		}
		seen[typ] = true
		if typ != 0 {
			continue
		}
		var err error
		if name, err = sniHostName(body, name); err != nil {
			return "", err
		}
	}
	return name, nil
}

// sniHostName reads a server_name extension body and returns its host name; name is the
// one found so far, so a second host name is refused.
func sniHostName(body []byte, name string) (string, error) {
	if len(body) < 2 || int(body[0])<<8|int(body[1]) != len(body)-2 || len(body) == 2 {
		return "", errMalformedHello()
	}
	list := body[2:]
	for len(list) > 0 {
		if len(list) < 3 {
			return "", errMalformedHello()
		}
		nt, l := list[0], int(list[1])<<8|int(list[2])
		list = list[3:]
		if l == 0 || len(list) < l {
			return "", errMalformedHello()
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
	return name, nil
}
