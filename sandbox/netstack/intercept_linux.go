// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/fledgehq/fledge/egress"
)

// A connection to a destination fledge must read (a bound secret goes there, or HTTP
// rules narrow it) is not spliced: fledge terminates the program's TLS with a certificate
// of the session's CA (plain HTTP it reads as it is), serves the requests with Go's HTTP
// server (HTTP/1.1, and HTTP/2 when the program offers it), and sends each on over TLS of
// its own to the real host, verified against the host's trust store. On the way it checks
// the destination's rules, puts each bound secret's value where its placeholder stands in
// the headers (Basic credentials included), refuses a request carrying the placeholder of a
// secret bound elsewhere, and records every request (net_http). Answers pass unchanged.

// Bounds of a read connection.
const (
	interceptHeaderBytes = 64 << 10
	interceptStreams     = 100 // HTTP/2 streams open at once on one connection
	// interceptHeaders bounds the header fields of one request (the server's byte bound
	// applies too; many tiny fields are refused on their own count).
	interceptHeaders = 256
)

type interceptor struct {
	e        *Engine
	name     string
	port     uint16
	address  string
	scheme   string
	rules    []egress.Rule
	bound    []egress.Secret // secrets bound to this destination
	foreign  []egress.Secret // every other secret of the session
	proxy    *httputil.ReverseProxy
	rt       http.RoundTripper
	in, out  *atomic.Int64
	last     *atomic.Int64
	idle     time.Duration
	upstream netip.AddrPort
	// raw is the program's connection under fledge's TLS (reset when an answer is cut);
	// h1 while it carries HTTP/1 (an HTTP/2 answer cut is its stream's reset).
	raw net.Conn
	h1  bool
	// cut: why an answer was cut ("" none): the connection's close record says so.
	cut atomic.Pointer[string]
}

// intercept serves one program connection to name:port (decided and recorded already).
func (e *Engine) intercept(c net.Conn, ev egress.Event, target netip.Addr, start time.Time) {
	var in, out, last atomic.Int64
	last.Store(time.Now().UnixNano())
	pol := e.cfg.Policy
	ic := &interceptor{e: e, name: ev.Host, port: ev.Port, address: ev.Address,
		rules: pol.RulesFor(ev.Host, ev.Port), bound: pol.SecretsFor(ev.Host, ev.Port),
		in: &in, out: &out, last: &last, idle: e.lim.IdleTimeout,
		upstream: netip.AddrPortFrom(target, ev.Port), raw: c}
	for _, s := range pol.Secrets {
		if !containsSecret(ic.bound, s.Name) {
			ic.foreign = append(ic.foreign, s)
		}
	}
	reason := "closed"
	defer func() {
		if why := ic.cut.Load(); why != nil && reason == "closed" {
			reason = *why
		}
		c.Close()
		e.emit(egress.Event{Kind: egress.EventClose, Proto: "tcp", Host: ev.Host, Port: ev.Port, Address: ev.Address,
			Allow: true, Reason: reason, BytesOut: out.Load(), BytesIn: in.Load(), Duration: time.Since(start)})
	}()
	cc := &countConn{Conn: c, in: &in, out: &out, last: &last, max: e.lim.MaxBytes, closed: make(chan struct{})}
	br := bufio.NewReaderSize(cc, 4096)
	_ = c.SetReadDeadline(time.Now().Add(headTimeout))
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	pc := &peekedConn{countConn: cc, br: br}
	if first[0] != 0x16 {
		ic.scheme = "http"
		ic.h1 = true
		ic.setup(false)
		ic.serveHTTP1(pc)
		return
	}
	ic.scheme = "https"
	ca := e.cfg.CA
	if ca == nil {
		reason = egress.ReasonTLSRefused
		return
	}
	var sniBad string
	tc := tls.Server(pc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if h.ServerName != "" {
				if cn, ok := egress.CanonName(h.ServerName); !ok || cn != ic.name {
					sniBad = h.ServerName
					return nil, errors.New("server name is not the connection's")
				}
			}
			return ca.Leaf(ic.name)
		},
	})
	_ = tc.SetDeadline(time.Now().Add(headTimeout))
	if err := tc.Handshake(); err != nil {
		if sniBad != "" {
			reason = egress.ReasonNameMismatch
			e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: shorten(strings.ToLower(sniBad), sniBad), Port: ev.Port,
				Address: ev.Address, Reason: egress.ReasonNameMismatch})
			return
		}
		reason = egress.ReasonTLSRefused
		e.emit(egress.Event{Kind: egress.EventHTTP, Proto: "tcp", Host: ic.name, Port: ic.port, Address: ic.address,
			Reason: egress.ReasonTLSRefused})
		return
	}
	_ = tc.SetDeadline(time.Time{})
	h2 := tc.ConnectionState().NegotiatedProtocol == "h2"
	ic.h1 = !h2
	ic.setup(h2)
	if h2 {
		srv := &http2.Server{MaxConcurrentStreams: interceptStreams, MaxReadFrameSize: 1 << 20, IdleTimeout: ic.idle}
		srv.ServeConn(tc, &http2.ServeConnOpts{Handler: ic, BaseConfig: ic.server()})
		return
	}
	ic.serveHTTP1(tc)
}

func containsSecret(ss []egress.Secret, name string) bool {
	for _, s := range ss {
		if s.Name == name {
			return true
		}
	}
	return false
}

func (ic *interceptor) server() *http.Server {
	return &http.Server{Handler: ic, MaxHeaderBytes: interceptHeaderBytes, ReadHeaderTimeout: headTimeout,
		IdleTimeout: ic.idle, ErrorLog: log.New(io.Discard, "", 0)}
}

// serveHTTP1 serves HTTP/1.1 on one connection until it closes. The requests are held to
// fledge's strict reading before Go's server reads them (egress.StreamChecker): what Go
// would take leniently (a folded line, chunked over a Content-Length) is refused.
func (ic *interceptor) serveHTTP1(c net.Conn) {
	done := make(chan struct{})
	sc := &strictConn{Conn: c, refused: func(err error) {
		ic.e.emit(egress.Event{Kind: egress.EventHTTP, Proto: "tcp", Host: ic.name, Port: ic.port, Address: ic.address,
			Reason: egress.ReasonBadRequest})
	}}
	wc := &closeNotifyConn{Conn: sc, done: done}
	srv := ic.server()
	_ = srv.Serve(&oneConnListener{c: wc})
	<-done
}

// setup takes the transport to the real host (shared by every connection of the session
// to the same destination, so a new connection of the program reuses fledge's kept-alive
// one to the host) and makes the proxy.
func (ic *interceptor) setup(h2 bool) {
	if h2 {
		ic.rt = ic.e.transport(ic.name, ic.upstream)
	} else {
		ic.rt = &inlineRT{e: ic.e, key: transportKey{ic.name, ic.upstream, ic.scheme}, scheme: ic.scheme}
	}
	authority := ic.name
	if !(ic.scheme == "https" && ic.port == 443 || ic.scheme == "http" && ic.port == 80) {
		authority = net.JoinHostPort(ic.name, strconv.Itoa(int(ic.port)))
	}
	ic.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = ic.scheme
			pr.Out.URL.Host = authority
			pr.Out.Host = authority
		},
		Transport:  ic.rt,
		BufferPool: proxyBufs,
		// Streamed answers (server-sent events, no length) are flushed as they come; the
		// rest in one write.
		FlushInterval: 0,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st := requestState(r)
			var uerr *tls.CertificateVerificationError
			var herr x509.HostnameError
			var uaerr x509.UnknownAuthorityError
			if errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &uaerr) {
				st.reason = egress.ReasonUpstreamTLS
				http.Error(w, "fledge: the destination's certificate did not verify: refused", http.StatusBadGateway)
				return
			}
			st.reason = egress.ReasonDialFailed
			http.Error(w, "fledge: the destination did not answer", http.StatusBadGateway)
		},
	}
}

type reqStateKey struct{}

type reqState struct {
	reason string
}

func requestState(r *http.Request) *reqState {
	st, _ := r.Context().Value(reqStateKey{}).(*reqState)
	if st == nil {
		return &reqState{}
	}
	return st
}

// recordPath is the request's path with the names of its query parameters, never their
// values.
func recordPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if r.URL.RawQuery == "" {
		return p
	}
	var keys []string
	for k := range r.URL.Query() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "="
	}
	return p + "?" + strings.Join(keys, "&")
}

func (ic *interceptor) record(r *http.Request, allow bool, why string, status int, secrets []string, bytesOut, bytesIn int64) {
	ic.e.emit(egress.Event{Kind: egress.EventHTTP, Proto: "tcp", Host: ic.name, Port: ic.port, Address: ic.address,
		Allow: allow, Reason: why, Method: r.Method, Path: ui(recordPath(r)), Status: status, Secrets: secrets,
		BytesOut: bytesOut, BytesIn: bytesIn})
}

// ui bounds a path for a record.
func ui(s string) string {
	if len(s) > 512 {
		return s[:512] + "…"
	}
	return s
}

// refuse answers a refused request from fledge itself: 403 and one line saying why.
func (ic *interceptor) refuse(w http.ResponseWriter, r *http.Request, why, text string) {
	ic.record(r, false, why, http.StatusForbidden, nil, 0, 0)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusForbidden)
	io.WriteString(w, "fledge: "+text+"\n")
}

func (ic *interceptor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if cn, ok := egress.CanonName(host); !ok || cn != ic.name {
		ic.e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: shorten(strings.ToLower(host), host), Port: ic.port,
			Address: ic.address, Reason: egress.ReasonNameMismatch})
		w.Header().Set("Connection", "close")
		http.Error(w, "fledge: this connection is for "+ic.name+" only", http.StatusMisdirectedRequest)
		return
	}
	if r.Method == http.MethodConnect {
		ic.refuse(w, r, egress.ReasonBadRequest, "CONNECT is not forwarded to "+ic.name)
		return
	}
	// TRACE (and IIS's TRACK) makes a server answer with the request it got, headers
	// included: the value fledge put in would come back to the program.
	if len(ic.bound) > 0 && (strings.EqualFold(r.Method, "TRACE") || strings.EqualFold(r.Method, "TRACK")) {
		ic.refuse(w, r, egress.ReasonBadRequest, r.Method+" is not forwarded to "+ic.name+", where fledge puts a secret in")
		return
	}
	if n := len(r.Header) + len(r.Trailer); n > interceptHeaders {
		ic.refuse(w, r, egress.ReasonLimit, fmt.Sprintf("more than %d header fields", interceptHeaders))
		return
	}
	if ic.rules != nil {
		ok := false
		for _, rule := range ic.rules {
			ok = ok || rule.Matches(r.Method, r.URL.EscapedPath())
		}
		if !ok {
			ic.refuse(w, r, egress.ReasonRule, fmt.Sprintf("%s %s is not allowed by the rules of %s:%d", r.Method, r.URL.EscapedPath(), ic.name, ic.port))
			return
		}
	}
	if s := placeholderIn(r, ic.foreign); s != "" {
		ic.refuse(w, r, egress.ReasonPlaceholder, "the placeholder of secret "+s+" is not bound to "+ic.name+"; refused")
		return
	}
	// A value goes out only over TLS fledge opened and verified: the program chooses to speak
	// plain HTTP to the destination, and fledge would otherwise send the value over the
	// network in the clear (to a TLS port at that).
	if ic.scheme != "https" {
		if s := placeholderIn(r, ic.bound); s != "" {
			ic.refuse(w, r, egress.ReasonPlaceholder, "the placeholder of secret "+s+" is put in over https only; refused")
			return
		}
	}
	if s, h := ic.misplaced(r.Header); s != "" {
		ic.refuse(w, r, egress.ReasonPlaceholder, "the placeholder of secret "+s+" goes in a credential header (Authorization, or one naming a key, token or secret), not in "+h+"; refused")
		return
	}
	used := ic.inject(r.Header)
	st := &reqState{reason: egress.ReasonGranted}
	r = r.WithContext(context.WithValue(r.Context(), reqStateKey{}, st))
	var bodyIn atomic.Int64
	if r.Body != nil {
		r.Body = &countBody{ReadCloser: r.Body, n: &bodyIn}
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		// The proxy aborts the handler (http.ErrAbortHandler) when the answer's body fails part
		// way (the destination's reset, the byte bound): Go's HTTP/1 server would then end
		// the connection with TLS's clean close, and an answer framed by the connection's
		// end would look whole. The request is recorded and the connection reset first.
		if v := recover(); v != nil {
			why := egress.ReasonReset
			if ic.in.Load() > ic.e.lim.MaxBytes {
				why = egress.ReasonLimit
			}
			ic.cut.CompareAndSwap(nil, &why)
			ic.record(r, true, why, sw.status, used, bodyIn.Load(), sw.n)
			if v == http.ErrAbortHandler && ic.h1 {
				reset(ic.raw)
			}
			panic(v)
		}
	}()
	ic.proxy.ServeHTTP(sw, r)
	ok := st.reason == egress.ReasonGranted
	ic.record(r, ok, st.reason, sw.status, used, bodyIn.Load(), sw.n)
}

// placeholderIn returns the name of the first of secrets whose placeholder the request
// carries ("" when none): in any header (decoded Basic credentials included), the target
// or the host.
func placeholderIn(r *http.Request, secrets []egress.Secret) string {
	if len(secrets) == 0 {
		return ""
	}
	texts := []string{r.URL.RequestURI(), r.Host}
	for _, vs := range r.Header {
		for _, v := range vs {
			texts = append(texts, v)
			if d, ok := basicDecoded(v); ok {
				texts = append(texts, d)
			}
		}
	}
	for _, s := range secrets {
		for _, t := range texts {
			if strings.Contains(t, s.Placeholder) {
				return s.Name
			}
		}
	}
	return ""
}

func basicDecoded(v string) (string, bool) {
	if len(v) < 6 || !strings.EqualFold(v[:6], "basic ") {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:]))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// credentialHeader reports whether a header is one a credential is sent in: fledge puts a
// value only there, so a program cannot have it written into a header the server echoes
// back (a debugging header, a Referer, a User-Agent an API reflects in an error).
func credentialHeader(name string) bool {
	n := strings.ToLower(name)
	if n == "authorization" {
		return true
	}
	for _, w := range []string{"key", "token", "auth", "secret", "password", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// misplaced returns the name of a bound secret whose placeholder stands in a header that
// carries no credentials, and that header ("" when none).
func (ic *interceptor) misplaced(h http.Header) (string, string) {
	for k, vs := range h {
		if credentialHeader(k) {
			continue
		}
		for _, v := range vs {
			texts := []string{v}
			if d, ok := basicDecoded(v); ok {
				texts = append(texts, d)
			}
			for _, s := range ic.bound {
				for _, t := range texts {
					if strings.Contains(t, s.Placeholder) {
						return s.Name, k
					}
				}
			}
		}
	}
	return "", ""
}

// inject puts each bound secret's value where its placeholder stands in a header value
// (inside Basic credentials too) and returns the names of the secrets it put in.
func (ic *interceptor) inject(h http.Header) []string {
	var used []string
	for k, vs := range h {
		for i, v := range vs {
			nv := v
			for _, s := range ic.bound {
				if strings.Contains(nv, s.Placeholder) {
					nv = strings.ReplaceAll(nv, s.Placeholder, s.Value)
					used = appendOnce(used, s.Name)
				}
			}
			if d, ok := basicDecoded(nv); ok {
				nd := d
				for _, s := range ic.bound {
					if strings.Contains(nd, s.Placeholder) {
						nd = strings.ReplaceAll(nd, s.Placeholder, s.Value)
						used = appendOnce(used, s.Name)
					}
				}
				if nd != d {
					nv = nv[:6] + base64.StdEncoding.EncodeToString([]byte(nd))
				}
			}
			vs[i] = nv
		}
		h[k] = vs
	}
	sort.Strings(used)
	return used
}

func appendOnce(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// foreignPlaceholder returns the name of a secret whose placeholder b carries ("" when
// none): a request read on a connection fledge does not terminate goes where no secret is
// bound.
func (e *Engine) foreignPlaceholder(b []byte) string {
	for _, s := range e.cfg.Policy.Secrets {
		if s.Placeholder != "" && strings.Contains(string(b), s.Placeholder) {
			return s.Name
		}
	}
	return ""
}

type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 || w.status < 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countConn counts a program connection's bytes against the bound and keeps it alive for
// the idle watchdog.
type countConn struct {
	net.Conn
	in, out, last *atomic.Int64
	max           int64
	closed        chan struct{}
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.out.Add(int64(n)) > c.max {
		return n, errLimit
	}
	c.last.Store(time.Now().UnixNano())
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	if c.in.Add(int64(len(p))) > c.max {
		return 0, errLimit
	}
	c.last.Store(time.Now().UnixNano())
	return c.Conn.Write(p)
}

// peekedConn reads first what was peeked.
type peekedConn struct {
	*countConn
	br *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.br.Read(p) }

type closeNotifyConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}

// oneConnListener hands out one connection, then says it is closed.
type oneConnListener struct {
	c    net.Conn
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.c })
	if c != nil {
		return c, nil
	}
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// maxTransports bounds the upstream transports one engine keeps (one per destination).
const maxTransports = 256

// transportKey tells fledge's connections to hosts apart: by name, address and scheme (a
// plain connection never carries a request the program sent over TLS).
type transportKey struct {
	name   string
	up     netip.AddrPort
	scheme string
}

// transport is the engine's transport to name at up, verified against the host's trust
// store (or Config.RootCAs).
func (e *Engine) transport(name string, up netip.AddrPort) *http.Transport {
	e.trMu.Lock()
	defer e.trMu.Unlock()
	k := transportKey{name, up, "https"}
	if tr, ok := e.trs[k]; ok {
		return tr
	}
	if e.trs == nil || len(e.trs) >= maxTransports {
		for _, tr := range e.trs {
			tr.CloseIdleConnections()
		}
		e.trs = map[transportKey]*http.Transport{}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, e.lim.DialTimeout)
			defer cancel()
			return e.dial(ctx, up)
		},
		TLSClientConfig:        &tls.Config{ServerName: name, RootCAs: e.cfg.RootCAs, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(16)},
		ForceAttemptHTTP2:      true,
		DisableCompression:     true, // the program's Accept-Encoding and the answer's encoding pass as they are
		TLSHandshakeTimeout:    e.lim.DialTimeout,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: interceptHeaderBytes,
	}
	e.trs[k] = tr
	return tr
}

// closeTransports ends the engine's kept-alive connections to the hosts it reads.
func (e *Engine) closeTransports() {
	e.trMu.Lock()
	defer e.trMu.Unlock()
	for _, tr := range e.trs {
		tr.CloseIdleConnections()
	}
	e.trs = nil
	e.upstream.closeAll()
}

// sessionCache resumes fledge's TLS sessions with the hosts it reads.
func (e *Engine) sessionCache() tls.ClientSessionCache {
	e.trMu.Lock()
	defer e.trMu.Unlock()
	if e.tlsCache == nil {
		e.tlsCache = tls.NewLRUClientSessionCache(64)
	}
	return e.tlsCache
}

// strictConn checks what the program sends against egress.StreamChecker as it is read.
type strictConn struct {
	net.Conn
	check   egress.StreamChecker
	refused func(error)
	failed  bool
}

func (c *strictConn) Read(p []byte) (int, error) {
	if c.failed {
		return 0, egress.ErrBadRequest
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if ferr := c.check.Feed(p[:n]); ferr != nil {
			c.failed = true
			c.refused(ferr)
			return 0, ferr
		}
	}
	return n, err
}

// proxyBufs are the proxy's body copy buffers, reused (the proxy would make 32 KiB per
// request otherwise).
var proxyBufs = bufPool{}

type bufPool struct{}

func (bufPool) Get() []byte  { return *(copyBufs.Get().(*[]byte)) }
func (bufPool) Put(b []byte) { copyBufs.Put(&b) }
