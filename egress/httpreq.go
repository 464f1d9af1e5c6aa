// SPDX-License-Identifier: MIT

package egress

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// An HTTP/1 request names the site it is for in one of three places, and a server routes
// it by whichever RFC 9112 says wins: the authority of an absolute-form target
// ("GET http://other.test/ HTTP/1.1", which an origin must honour over Host), the
// authority of a CONNECT, else the Host header. ParseRequestHead reads a request head the
// way such a server would and says which name that is; anything it cannot decide the same
// way (two Hosts, a folded line, a Transfer-Encoding other than chunked, HTTP/2 without
// TLS, a head over the bound) is an error, so the engine refuses it instead of letting it
// through unchecked. Head then gives the head fledge forwards: the same request, with the
// one Host the decision was made on, so the destination cannot read it another way.

var (
	// ErrNotHTTP: the bytes are not an HTTP/1 request line (another protocol): there is no
	// name in them to check.
	ErrNotHTTP = errors.New("not an HTTP/1 request")
	// ErrIncomplete: the head has not all arrived yet; read more (up to the bound).
	ErrIncomplete = errors.New("HTTP request head incomplete")
	// ErrBadRequest is wrapped by every refusal of a first message (an HTTP request, a TLS
	// ClientHello) whose destination fledge cannot decide.
	ErrBadRequest = errors.New("request refused")
)

// RequestError says why a request head was refused (user-facing: no request bytes).
type RequestError struct{ Why string }

func (e *RequestError) Error() string { return ErrBadRequest.Error() + ": " + e.Why }
func (e *RequestError) Unwrap() error { return ErrBadRequest }

func badRequest(why string) error { return &RequestError{Why: why} }

// TargetForm is the form of a request-target (RFC 9112 section 3.2).
type TargetForm int

// The four forms.
const (
	OriginForm    TargetForm = iota // "/path?query"
	AbsoluteForm                    // "http://host:port/path" (to a proxy, or an origin that must honour it)
	AuthorityForm                   // "host:port" (CONNECT only)
	AsteriskForm                    // "*" (OPTIONS only)
)

// Bounds of one request head.
const (
	MaxRequestHead    = 64 << 10 // bytes of one head, leading empty lines included
	maxRequestHeaders = 256      // header lines of one head
)

// Request is one parsed request head.
type Request struct {
	Method string
	Target string
	Minor  int // HTTP/1.Minor (0 or 1)
	Form   TargetForm
	// Host is the name (canonical: lower case, no trailing dot) or the address literal the
	// request is routed to; "" for an HTTP/1.0 origin-form request with no Host (the
	// connection's own name applies).
	Host string
	// Addr is set when Host is an address literal.
	Addr netip.Addr
	// Port is the port of an absolute-form or CONNECT authority; 0 in origin and asterisk
	// form, where the connection's port applies.
	Port uint16
	// ContentLength is the body's length, -1 with no Content-Length (no body, or Chunked).
	ContentLength int64
	Chunked       bool
	// Upgrade: a WebSocket upgrade is asked for; after a 101 the connection is the
	// server's protocol, not HTTP. Other upgrade tokens (h2c among them) are dropped from
	// the forwarded head: HTTP/2 frames would carry names fledge does not read.
	Upgrade bool
	// Consumed is how many input bytes the head took (leading empty lines included).
	Consumed int

	hostValue string // the Host header's value as sent ("" when none)
	authority string // an absolute-form or CONNECT authority as sent
	fields    []field
}

type field struct{ name, value string }

// Connect reports whether r is a CONNECT (a tunnel to Host:Port once answered 2xx).
func (r *Request) Connect() bool { return r.Form == AuthorityForm }

// Tunnel reports whether a successful answer turns the connection into something other
// than HTTP requests (a CONNECT's tunnel or a WebSocket).
func (r *Request) Tunnel() bool { return r.Connect() || r.Upgrade }

func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

// maxLeadingEmpty bounds the empty lines skipped before a request line (a client sends one
// at most, after a body it miscounted; more is a stream that never starts).
const maxLeadingEmpty = 8

// skipEmptyLines returns the offset past leading empty lines (RFC 9112 section 2.2: a
// server ignores at least one empty line before the request line; real ones skip any).
func skipEmptyLines(b []byte) int {
	i := 0
	for i < len(b) {
		switch {
		case b[i] == '\n':
			i++
		case b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n':
			i += 2
		default:
			return i
		}
	}
	return i
}

// couldBeRequestLine reports whether p (no newline in it yet) can still grow into an
// HTTP request line: a token, then a space and printable text. A binary protocol's first
// bytes fail at once, so they are not held back waiting for a newline.
func couldBeRequestLine(p []byte) bool {
	i := 0
	for i < len(p) && isTchar(p[i]) {
		i++
	}
	if i == len(p) {
		return true
	}
	if i == 0 || p[i] != ' ' && p[i] != '\t' {
		return false
	}
	for _, c := range p[i:] {
		if c < 0x20 && c != '\t' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}

// SniffHTTP says whether b, the first bytes of a connection, is (or may still become) an
// HTTP/1 request: ErrNotHTTP when it cannot be, ErrIncomplete when its first line has not
// all arrived, nil when it is a request line of HTTP (whatever its validity).
func SniffHTTP(b []byte) error {
	// Node's parser skips any run of CR and LF before a request line, a lone CR included,
	// so the sniff does too: what follows is held to HTTP's rules (ParseRequestHead then
	// refuses the bare CR), never spliced as another protocol.
	rest := bytes.TrimLeft(b, "\r\n")
	nl := bytes.IndexByte(rest, '\n')
	if nl < 0 {
		if len(rest) > 0 && !couldBeRequestLine(rest) {
			return ErrNotHTTP
		}
		return ErrIncomplete
	}
	line := strings.TrimSuffix(string(rest[:nl]), "\r")
	if lineIsHTTP(line) {
		return nil
	}
	return ErrNotHTTP
}

// lineIsHTTP reports whether line is meant as an HTTP request line, as any real server
// may read it: a word after the first that starts "HTTP/" (or "RTSP/" or "ICE/", versions
// Node's parser takes as HTTP/1), or METHOD TARGET alone (HTTP/0.9, which Node takes with
// headers after it, for any method) when TARGET is a path, "*", an absolute URL or a
// CONNECT's authority. Such a line is then held to HTTP/1's rules; any other line (an
// SMTP or Redis command) is another protocol.
func lineIsHTTP(line string) bool {
	words := strings.FieldsFunc(line, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\v' || r == '\f' || r == '\r'
	})
	if len(words) < 2 || !isToken(words[0]) {
		return false
	}
	for _, w := range words[1:] {
		for _, v := range []string{"HTTP/", "RTSP/", "ICE/"} {
			if len(w) >= len(v) && strings.EqualFold(w[:len(v)], v) {
				return true
			}
		}
	}
	if len(words) != 2 {
		return false
	}
	target := words[1]
	return target[0] == '/' || target[0] == '*' || strings.Contains(target, "://") ||
		strings.EqualFold(words[0], "CONNECT")
}

// ParseRequestHead parses the request head at the start of b (at most max bytes of it,
// leading empty lines included). ErrNotHTTP: not a request line at all; ErrIncomplete:
// read more; a *RequestError: refuse the request.
func ParseRequestHead(b []byte, max int) (*Request, error) {
	if max <= 0 || max > MaxRequestHead {
		max = MaxRequestHead
	}
	if len(b) > max {
		b = b[:max]
	}
	if err := SniffHTTP(b); err == ErrNotHTTP {
		return nil, err
	}
	start := skipEmptyLines(b)
	if bytes.Count(b[:start], []byte("\n")) > maxLeadingEmpty {
		return nil, badRequest("more than " + strconv.Itoa(maxLeadingEmpty) + " empty lines before the request line")
	}
	r := &Request{ContentLength: -1}
	if nl := bytes.IndexByte(b[start:], '\n'); nl >= 0 {
		// The request line is judged as soon as it is whole: an HTTP/0.9 line has no
		// head to wait for.
		line := b[start : start+nl]
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.IndexByte(line, '\r') >= 0 {
			return nil, badRequest("a bare CR in the request line")
		}
		if err := r.parseRequestLine(string(line)); err != nil {
			return nil, err
		}
	}
	end := headEnd(b[start:])
	if end < 0 {
		if len(b) >= max {
			return nil, badRequest("request head larger than " + strconv.Itoa(max) + " bytes")
		}
		return nil, ErrIncomplete
	}
	r.Consumed = start + end
	lines := splitLines(b[start : start+end])
	if lines == nil {
		return nil, badRequest("a bare CR in the request head")
	}
	if err := r.parseFields(lines[1 : len(lines)-1]); err != nil {
		return nil, err
	}
	if err := r.decide(); err != nil {
		return nil, err
	}
	return r, nil
}

// headEnd returns the length of the head up to and including its empty line, -1 when it
// has not arrived.
func headEnd(b []byte) int {
	for i := 0; i < len(b); {
		nl := bytes.IndexByte(b[i:], '\n')
		if nl < 0 {
			return -1
		}
		line := b[i : i+nl]
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			if i == 0 {
				return -1 // cannot happen after skipEmptyLines; no empty head
			}
			return i + nl + 1
		}
		i += nl + 1
	}
	return -1
}

// splitLines cuts a head into lines without their CRLF or LF; nil when a CR stands
// anywhere but before a LF (servers disagree on what a bare CR means).
func splitLines(head []byte) []string {
	var out []string
	for len(head) > 0 {
		nl := bytes.IndexByte(head, '\n')
		line := head[:nl]
		head = head[nl+1:]
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.IndexByte(line, '\r') >= 0 {
			return nil
		}
		out = append(out, string(line))
	}
	return out
}

func (r *Request) parseRequestLine(line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || strings.ContainsAny(proto, " \t") || strings.ContainsAny(method, "\t") {
		if ok1 && !ok2 {
			return badRequest("an HTTP/0.9 request (no version, no Host) cannot be decided")
		}
		return badRequest("the request line is not METHOD SP TARGET SP VERSION")
	}
	if !isToken(method) {
		return badRequest("the method is not a token")
	}
	switch proto {
	case "HTTP/1.1":
		r.Minor = 1
	case "HTTP/1.0":
		r.Minor = 0
	case "HTTP/2.0":
		return badRequest("HTTP/2 without TLS (prior knowledge) carries names fledge does not read")
	default:
		return badRequest("the version is not HTTP/1.0 or HTTP/1.1")
	}
	if target == "" {
		return badRequest("empty request target")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= 0x20 || c >= 0x7f || c == '#' {
			return badRequest("the request target holds a space, control, non-ASCII byte or fragment")
		}
	}
	r.Method, r.Target = method, target
	switch {
	case method == "CONNECT":
		r.Form = AuthorityForm
		r.authority = target
	case target == "*":
		if method != "OPTIONS" {
			return badRequest(`a "*" target is for OPTIONS only`)
		}
		r.Form = AsteriskForm
	case target[0] == '/':
		r.Form = OriginForm
	default:
		scheme, rest, ok := strings.Cut(target, "://")
		if !ok {
			return badRequest("the request target is neither a path nor an absolute URL")
		}
		switch strings.ToLower(scheme) {
		case "http", "https", "ws", "wss":
		default:
			return badRequest("an absolute target's scheme is not http, https, ws or wss")
		}
		auth := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			auth = rest[:i]
		}
		r.Form = AbsoluteForm
		r.authority = auth
	}
	return nil
}

func (r *Request) parseFields(lines []string) error {
	if len(lines) > maxRequestHeaders {
		return badRequest("more than " + strconv.Itoa(maxRequestHeaders) + " header lines")
	}
	var te, cl, upgrade []string
	for _, l := range lines {
		if l == "" {
			return badRequest("an empty header line")
		}
		if l[0] == ' ' || l[0] == '\t' {
			return badRequest("a folded header line (obsolete line folding)")
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || !isToken(name) {
			return badRequest("a header line that is not NAME: VALUE")
		}
		value = strings.Trim(value, " \t")
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return badRequest("a control byte in a header value")
			}
		}
		switch {
		case strings.EqualFold(name, "Host"):
			if r.hostValue != "" || r.hasHost() {
				return badRequest("more than one Host header")
			}
			r.hostValue = value
			r.fields = append(r.fields, field{name: "Host", value: value})
			continue
		case strings.EqualFold(name, "Transfer-Encoding"):
			te = append(te, value)
		case strings.EqualFold(name, "Content-Length"):
			cl = append(cl, value)
		case strings.EqualFold(name, "Upgrade"):
			upgrade = append(upgrade, value)
			continue // forwarded by Head only if it is a WebSocket upgrade
		case strings.EqualFold(name, "HTTP2-Settings"):
			continue // belongs to an h2c upgrade, which is dropped
		}
		r.fields = append(r.fields, field{name: name, value: value})
	}
	switch {
	case len(te) > 0 && len(cl) > 0:
		return badRequest("both Transfer-Encoding and Content-Length (request smuggling)")
	case len(te) > 1:
		return badRequest("more than one Transfer-Encoding header")
	case len(te) == 1:
		if r.Minor == 0 {
			return badRequest("Transfer-Encoding in an HTTP/1.0 request")
		}
		if !strings.EqualFold(te[0], "chunked") {
			return badRequest("a Transfer-Encoding other than chunked")
		}
		r.Chunked = true
	case len(cl) > 1:
		return badRequest("more than one Content-Length header")
	case len(cl) == 1:
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 || cl[0] == "" || cl[0][0] < '0' || cl[0][0] > '9' {
			return badRequest("a Content-Length that is not a number")
		}
		r.ContentLength = n
	}
	for _, u := range upgrade {
		for _, tok := range strings.Split(u, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				r.Upgrade = true
			}
		}
	}
	return nil
}

func (r *Request) hasHost() bool {
	for _, f := range r.fields {
		if f.name == "Host" {
			return true
		}
	}
	return false
}

// decide sets Host, Addr and Port from the authority that routes the request.
func (r *Request) decide() error {
	switch r.Form {
	case AbsoluteForm, AuthorityForm:
		if strings.Contains(r.authority, "@") {
			return badRequest("user information in the request target's authority")
		}
		host, port, err := splitAuthority(r.authority, r.Form == AuthorityForm)
		if err != nil {
			return err
		}
		if port == 0 {
			switch strings.ToLower(r.Target[:strings.Index(r.Target, ":")]) {
			case "https", "wss":
				port = 443
			default:
				port = 80
			}
		}
		r.Port = port
		return r.setHost(host)
	default:
		if r.hostValue == "" {
			if r.hasHost() || r.Minor == 1 {
				return badRequest("no Host (or an empty one) in an HTTP/1.1 request")
			}
			return nil
		}
		host, _, err := splitAuthority(r.hostValue, false)
		if err != nil {
			return err
		}
		return r.setHost(host)
	}
}

func (r *Request) setHost(host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return badRequest("an address with a zone")
		}
		r.Addr = a.Unmap()
		r.Host = r.Addr.String()
		return nil
	}
	cn, ok := CanonName(host)
	if !ok {
		return badRequest("the host is not a DNS name or an address")
	}
	r.Host = cn
	return nil
}

// splitAuthority splits "host[:port]" ("[v6]:port" for IPv6). needPort: a CONNECT
// authority must name its port.
func splitAuthority(a string, needPort bool) (string, uint16, error) {
	if a == "" {
		return "", 0, badRequest("an empty authority")
	}
	host, portStr := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", 0, badRequest("an unclosed IPv6 literal")
		}
		host = a[1:end]
		rest := a[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return "", 0, badRequest("bytes after an IPv6 literal")
			}
			portStr = rest[1:]
		}
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", 0, badRequest("a bracketed host that is not an IPv6 address")
		}
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		host, portStr = a[:i], a[i+1:]
		if strings.Contains(host, ":") {
			return "", 0, badRequest("an IPv6 address outside brackets")
		}
	}
	if host == "" {
		return "", 0, badRequest("an authority with no host")
	}
	if portStr == "" {
		if needPort {
			return "", 0, badRequest("a CONNECT target without a port")
		}
		return host, 0, nil
	}
	n, err := strconv.Atoi(portStr)
	if err != nil || n < 1 || n > 65535 || portStr[0] < '0' || portStr[0] > '9' || len(portStr) > 5 {
		return "", 0, badRequest("a port that is not a number from 1 to 65535")
	}
	return host, uint16(n), nil
}

// Head returns the request head to forward: the request line as parsed, one Host (the
// target's authority in absolute and CONNECT form, else the Host sent, else
// defaultHost), the other header lines in their order, CRLF line ends.
func (r *Request) Head(defaultHost string) []byte {
	var b bytes.Buffer
	b.Grow(r.Consumed + 64)
	b.WriteString(r.Method)
	b.WriteByte(' ')
	b.WriteString(r.Target)
	if r.Minor == 1 {
		b.WriteString(" HTTP/1.1\r\n")
	} else {
		b.WriteString(" HTTP/1.0\r\n")
	}
	host := r.hostValue
	switch {
	case r.Form == AbsoluteForm || r.Form == AuthorityForm:
		host = r.authority
	case host == "":
		host = defaultHost
	}
	if host != "" {
		b.WriteString("Host: ")
		b.WriteString(host)
		b.WriteString("\r\n")
	}
	for _, f := range r.fields {
		if f.name == "Host" {
			continue
		}
		b.WriteString(f.name)
		b.WriteString(": ")
		b.WriteString(f.value)
		b.WriteString("\r\n")
	}
	if r.Upgrade {
		b.WriteString("Upgrade: websocket\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// Field is the value of the first header field named name (case-insensitive), "" when
// there is none.
func (r *Request) Field(name string) string {
	for _, f := range r.fields {
		if strings.EqualFold(f.name, name) {
			return f.value
		}
	}
	return ""
}

// Drop removes every header field named name (case-insensitive) from the head Head
// returns: a proxy's own fields (Proxy-Authorization) are not passed on.
func (r *Request) Drop(name string) {
	r.fields = slices.DeleteFunc(r.fields, func(f field) bool { return strings.EqualFold(f.name, name) })
}

// HeadProgress says when a growing buffer is worth parsing again, so that a head sent a
// byte at a time costs linear work, not a parse of everything so far at every byte: when
// the first line has just ended, when the empty line that ends a head may have arrived,
// when the buffer has doubled since the last parse, or at the bound.
type HeadProgress struct {
	seen       int // bytes looked at
	lastParsed int
	firstLine  bool
}

// Due reports whether b (the buffer so far, grown from what was seen) must be parsed now.
func (h *HeadProgress) Due(b []byte, bound int) bool {
	from := h.seen
	h.seen = len(b)
	// Until its first line ends, a short buffer is always looked at: another protocol's
	// first bytes are told from a request line at once.
	due := len(b) >= bound || len(b) >= 2*h.lastParsed+64 || !h.firstLine && len(b) <= 256
	if !h.firstLine && bytes.IndexByte(b[from:], '\n') >= 0 {
		h.firstLine, due = true, true
	}
	if !due {
		scan := b[max(0, from-3):]
		due = bytes.Contains(scan, []byte("\n\n")) || bytes.Contains(scan, []byte("\n\r\n"))
	}
	if due {
		h.lastParsed = len(b)
	}
	return due
}

// Reset starts over for the next head.
func (h *HeadProgress) Reset() { *h = HeadProgress{} }
