// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// A connection made to a granted name is checked message by message, not only at its
// start: a server that hosts several sites routes each HTTP request by the name in it, so
// every request on a kept-alive connection is decided (egress.ParseRequestHead reads it as
// such a server would) and forwarded in the one form that was decided, its body re-framed
// by fledge so the next request starts where fledge says. A TLS ClientHello is decided by
// its server name. A CONNECT is decided by its authority, and its tunnel, once the
// destination answers 2xx, is checked again as a new connection to that authority. The
// destination's answers are read too (never changed), only to learn whether a CONNECT or a
// WebSocket upgrade succeeded: until then nothing more of the program's bytes passes.

const (
	// headTimeout: a request head or ClientHello, once begun, must arrive within it.
	headTimeout = 10 * time.Second
	// maxPipelined bounds the requests sent and not yet answered on one connection.
	maxPipelined = 64
	// maxTunnelDepth bounds CONNECT tunnels inside tunnels on one connection.
	maxTunnelDepth = 4
	// flowBuf is each direction's read buffer: a whole head (or ClientHello) fits.
	flowBuf = egress.MaxRequestHead + 4096
)

// errLimit: the connection's byte bound was reached.
var errLimit = errors.New("byte bound reached")

type verdict int

const (
	verdictHTTP    verdict = iota // the answer was not a tunnel: requests go on
	verdictTunnel                 // 2xx to a CONNECT, 101 to a WebSocket upgrade
	verdictUnknown                // the answer could not be read: the connection ends
)

type pendingReq struct {
	method  string
	connect bool
	upgrade bool
	verdict chan verdict // buffered 1; only for a tunnel request
}

// flow is one name-checked connection: c is the program's side, up the destination's.
type flow struct {
	e             *Engine
	c, up         net.Conn
	ev            egress.Event // the connection as decided: its name, port and address
	in, out, last *atomic.Int64
	setReason     func(string)
	// closeAll ends the connection with a reset (a decision or a failure, never a clean end).
	closeAll func()

	slots   chan struct{} // a slot per request in flight
	dead    chan struct{} // closed when the answers side has ended
	mu      sync.Mutex
	queue   []*pendingReq
	lost    bool   // the answers are no longer followed (not HTTP, or unreadable)
	lastRec string // the last host:port recorded on this connection
	// proxied: a plain HTTP proxy connection (the session's proxy); every request must
	// name this authority, the one connect decided.
	proxied string
	// inErr: the answers side's first failure (the destination's read, the program's write,
	// the byte bound), kept by answersTee; only the responses goroutine touches it.
	inErr error
}

func newFlow(e *Engine, c, up net.Conn, ev egress.Event, in, out, last *atomic.Int64, setReason func(string), closeAll func()) *flow {
	return &flow{e: e, c: c, up: up, ev: ev, in: in, out: out, last: last, setReason: setReason, closeAll: closeAll,
		slots: make(chan struct{}, maxPipelined), dead: make(chan struct{}), lastRec: ev.Host + ":" + itoa(ev.Port)}
}

// countW writes to w, counting bytes against the connection's bound in n.
type countW struct {
	w    io.Writer
	n    *atomic.Int64
	last *atomic.Int64
	max  int64
}

func (cw countW) Write(p []byte) (int, error) {
	if cw.n.Add(int64(len(p))) > cw.max {
		return 0, errLimit
	}
	cw.last.Store(time.Now().UnixNano())
	return cw.w.Write(p)
}

func (f *flow) toUp() countW {
	return countW{w: f.up, n: f.out, last: f.last, max: f.e.lim.MaxBytes}
}

func (f *flow) toProgram() countW {
	return countW{w: f.c, n: f.in, last: f.last, max: f.e.lim.MaxBytes}
}

// refuse records a refused message of this connection and ends the connection.
func (f *flow) refuse(host string, port uint16, why string) {
	f.setReason(why)
	f.e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: host, Port: port,
		Address: f.ev.Address, Reason: why})
	f.closeAll()
}

// endOut passes the end of the program's stream on: a clean end as one (half-close), a
// failure (a reset) as a reset, so a cut upload never looks whole to the destination.
func (f *flow) endOut(err error) {
	if err == io.EOF {
		halfClose(f.up)
		return
	}
	f.ioEnd(err)
}

// ioEnd ends the program's direction after an error that is no decision: the byte
// bound, or a side that went away.
func (f *flow) ioEnd(err error) {
	if errors.Is(err, errLimit) {
		f.setReason(egress.ReasonLimit)
	} else {
		f.setReason(egress.ReasonReset)
	}
	f.closeAll()
}

// requests runs the program -> destination direction.
func (f *flow) requests() {
	br := bufio.NewReaderSize(f.c, flowBuf)
	f.stream(br, f.ev.Host, f.ev.Port, 0)
}

// stream checks and forwards a byte stream meant for name:port: the connection itself,
// or a CONNECT tunnel through it.
func (f *flow) stream(br *bufio.Reader, name string, port uint16, depth int) {
	b, err := br.Peek(1)
	if err != nil {
		f.endOut(err)
		return
	}
	if b[0] == 0x16 {
		if f.hello(br, name, port) {
			f.raw(br)
		}
		return
	}
	f.httpRequests(br, name, port, depth)
}

// hello decides a TLS ClientHello by its server name.
func (f *flow) hello(br *bufio.Reader, name string, port uint16) bool {
	_ = f.c.SetReadDeadline(time.Now().Add(headTimeout))
	defer f.c.SetReadDeadline(time.Time{})
	hdr, err := br.Peek(5)
	if err != nil {
		f.refuse(name, port, egress.ReasonBadRequest)
		return false
	}
	n := egress.HelloRecordLen(hdr)
	if n > egress.MaxHelloRecord {
		f.refuse(name, port, egress.ReasonBadRequest)
		return false
	}
	rec, err := br.Peek(n)
	if err != nil {
		f.refuse(name, port, egress.ReasonBadRequest)
		return false
	}
	sn, err := egress.ClientHelloName(rec)
	if err != nil {
		f.refuse(name, port, egress.ReasonBadRequest)
		return false
	}
	if sn == "" {
		return true // no name asked for: the server's default for the granted name's address
	}
	cn, ok := egress.CanonName(sn)
	if !ok || !f.e.cfg.Policy.NameAndPort(cn, port) {
		f.refuse(shorten(cn, sn), port, egress.ReasonNameMismatch)
		return false
	}
	f.note(cn, port)
	return true
}

// raw forwards the rest of the program's stream unchecked (after a decided ClientHello,
// another protocol's first message, or a WebSocket's 101).
func (f *flow) raw(br *bufio.Reader) {
	if f.out.Load() > f.e.lim.MaxBytes {
		f.ioEnd(errLimit) // crossed while a message was read: no waiting for more
		return
	}
	if _, err := copyAll(f.toUp(), br); err != nil {
		f.ioEnd(err)
		return
	}
	halfClose(f.up)
}

// readHead reads one request head (with its bound and deadline).
func (f *flow) readHead(br *bufio.Reader) (*egress.Request, error) {
	return readRequestHead(f.c, br)
}

// readRequestHead reads one request head from br, c's reader, within headTimeout and
// egress.MaxRequestHead (a program's own requests and its requests to the proxy alike).
func readRequestHead(c net.Conn, br *bufio.Reader) (*egress.Request, error) {
	_ = c.SetReadDeadline(time.Now().Add(headTimeout))
	defer c.SetReadDeadline(time.Time{})
	var progress egress.HeadProgress
	for {
		buf, _ := br.Peek(br.Buffered())
		if progress.Due(buf, egress.MaxRequestHead) {
			req, err := egress.ParseRequestHead(buf, egress.MaxRequestHead)
			if err != egress.ErrIncomplete {
				return req, err
			}
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, &egress.RequestError{Why: "the request head did not arrive in time"}
			}
			return nil, &egress.RequestError{Why: "the connection ended inside a request head"}
		}
	}
}

func (f *flow) httpRequests(br *bufio.Reader, name string, port uint16, depth int) {
	for first := true; ; first = false {
		if _, err := br.Peek(1); err != nil {
			f.endOut(err)
			return
		}
		req, err := f.readHead(br)
		if err == egress.ErrNotHTTP && first {
			f.raw(br) // another protocol: no name in it to check
			return
		}
		if err != nil {
			f.refuse(name, port, egress.ReasonBadRequest)
			return
		}
		host, p, ok := f.admit(br, req, name, port)
		if !ok {
			return
		}
		f.note(host, p)
		pr := &pendingReq{method: req.Method, connect: req.Connect(), upgrade: req.Upgrade}
		if req.Tunnel() {
			if depth >= maxTunnelDepth {
				f.refuse(host, p, egress.ReasonBadRequest)
				return
			}
			pr.verdict = make(chan verdict, 1)
		}
		if !f.enqueue(pr) {
			f.refuse(host, p, egress.ReasonBadRequest)
			return
		}
		if !f.forward(br, req, name, host, p) {
			return
		}
		if pr.verdict == nil {
			continue
		}
		if !f.afterTunnelRequest(br, req, pr, host, p, depth) {
			return
		}
	}
}

// admit decides one request head: the destination it names (host:p) and whether it may go
// on. A refused request has already ended the connection (ok false).
func (f *flow) admit(br *bufio.Reader, req *egress.Request, name string, port uint16) (host string, p uint16, ok bool) {
	host, p = req.Host, port
	if req.Port != 0 {
		p = req.Port
	}
	if host == "" {
		host = name // HTTP/1.0 without Host: the server's site for this connection's name
	}
	if f.proxied != "" {
		// Decided already, by connect, for this authority: a request naming another
		// would go to this connection's destination all the same.
		if req.Form != egress.AbsoluteForm || req.Host+":"+itoa(p) != f.proxied {
			f.refuse(host, p, egress.ReasonNameMismatch)
			return host, p, false
		}
		req.Drop("Proxy-Authorization")
		req.Drop("Proxy-Connection")
	} else if ok, why := f.decide(req, host, p); !ok {
		f.refuse(host, p, why)
		return host, p, false
	}
	if head, _ := br.Peek(req.Consumed); len(f.e.cfg.Policy.Secrets) > 0 && f.e.foreignPlaceholder(head) != "" {
		// A secret's placeholder is worth something only where the secret is bound,
		// and fledge reads those connections itself: here it goes nowhere.
		f.setReason(egress.ReasonPlaceholder)
		f.e.emit(egress.Event{Kind: egress.EventHTTP, Proto: "tcp", Host: host, Port: p, Address: f.ev.Address,
			Reason: egress.ReasonPlaceholder, Method: req.Method, Path: requestPath(req.Target)})
		f.closeAll()
		return host, p, false
	}
	return host, p, true
}

// forward writes an admitted request's head and body upstream; false when the connection
// ended on the way (a malformed body refused, or an I/O error).
func (f *flow) forward(br *bufio.Reader, req *egress.Request, name, host string, p uint16) bool {
	w := f.toUp()
	if _, err := w.Write(req.Head(name)); err != nil {
		f.ioEnd(err)
		return false
	}
	_, _ = br.Discard(req.Consumed)
	var err error
	switch {
	case req.Chunked:
		_, err = egress.CopyChunked(w, br)
	case req.ContentLength > 0:
		_, err = io.CopyN(w, br, req.ContentLength)
	}
	if err != nil {
		var re *egress.RequestError
		if errors.As(err, &re) {
			f.refuse(host, p, egress.ReasonBadRequest)
			return false
		}
		f.ioEnd(err)
		return false
	}
	return true
}

// afterTunnelRequest waits for the server's answer to a CONNECT or upgrade request and
// carries on accordingly: true to read more HTTP requests (the server declined), false when
// the connection became a tunnel or was refused.
func (f *flow) afterTunnelRequest(br *bufio.Reader, req *egress.Request, pr *pendingReq, host string, p uint16, depth int) bool {
	var v verdict
	select {
	case v = <-pr.verdict:
	case <-f.dead:
		v = verdictUnknown
	}
	switch v {
	case verdictHTTP:
		return true
	case verdictTunnel:
		if req.Connect() {
			f.stream(br, host, p, depth+1)
		} else {
			f.raw(br)
		}
		return false
	default:
		f.refuse(host, p, egress.ReasonBadRequest)
		return false
	}
}

// decide decides one request for host:p. In origin form the request goes to the server
// this connection reached, which routes it by name: the name must be granted for the port.
// An absolute-form or CONNECT target is where a proxy would connect: decided as if the
// program had connected there itself (no SSRF by name through a granted proxy either).
func (f *flow) decide(req *egress.Request, host string, p uint16) (bool, string) {
	pol := f.e.cfg.Policy
	if req.Addr.IsValid() {
		if ok, _ := pol.DecideAddr(req.Addr, p); ok {
			return true, egress.ReasonGranted
		}
		return false, egress.ReasonNameMismatch
	}
	if !pol.NameAndPort(host, p) {
		return false, egress.ReasonNameMismatch
	}
	if req.Form == egress.OriginForm || req.Form == egress.AsteriskForm {
		return true, egress.ReasonGranted
	}
	addrs, err := f.e.resolve(host)
	if err != nil || len(addrs) == 0 {
		return false, egress.ReasonResolveFailed
	}
	why := egress.ReasonNotGranted
	for _, a := range addrs {
		ok, w := pol.DecideName(host, a, p, f.e.own[a])
		if ok {
			return true, w
		}
		why = w
	}
	return false, why
}

// note records a request or hello that names another granted host:port than the last one
// recorded on this connection (a site reached through the same server is in the log too).
func (f *flow) note(host string, p uint16) {
	key := host + ":" + itoa(p)
	f.mu.Lock()
	same := f.lastRec == key
	f.lastRec = key
	f.mu.Unlock()
	if same {
		return
	}
	f.e.emit(egress.Event{Kind: egress.EventConnect, Proto: "tcp", Host: host, Port: p,
		Address: f.ev.Address, Allow: true, Reason: egress.ReasonGranted})
}

func itoa(p uint16) string {
	var b [5]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + p%10)
		p /= 10
		if p == 0 {
			return string(b[i:])
		}
	}
}

// enqueue takes a slot for req; false when the answers are not followed any more and req
// needs its answer read (a tunnel), or the destination's side has ended.
func (f *flow) enqueue(pr *pendingReq) bool {
	select {
	case f.slots <- struct{}{}:
	case <-f.dead:
		return pr.verdict == nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost {
		<-f.slots
		return pr.verdict == nil
	}
	f.queue = append(f.queue, pr)
	return true
}

// next takes the oldest request in flight, nil when none is.
func (f *flow) next() *pendingReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) == 0 {
		return nil
	}
	pr := f.queue[0]
	f.queue = f.queue[1:]
	<-f.slots
	return pr
}

// setLost stops following the answers: a request waiting for its answer gets unknown.
func (f *flow) setLost() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost = true
	for _, pr := range f.queue {
		if pr.verdict != nil {
			pr.verdict <- verdictUnknown
		}
		<-f.slots
	}
	f.queue = nil
}

// responses runs the destination -> program direction: every byte is passed on as it
// arrives (through the tee, before it is parsed); the parse only follows the answers.
func (f *flow) responses() {
	defer close(f.dead)
	defer f.setLost()
	rb := bufio.NewReaderSize(answersTee{f}, 64<<10)
	discard := newCopyBuffer()
	defer discard.release()
	for {
		if _, err := rb.Peek(1); err != nil {
			f.endIn(err)
			return
		}
		pr := f.next()
		if pr == nil {
			f.rawIn() // bytes nobody asked for: another protocol, no answers to follow
			return
		}
		switch f.answer(rb, pr, discard) {
		case answerNext:
			continue
		case answerRaw:
			f.rawIn()
			return
		default:
			if pr.verdict != nil {
				pr.verdict <- verdictUnknown
			}
			f.rawIn()
			return
		}
	}
}

type answerAction int

const (
	answerNext answerAction = iota
	answerRaw
	answerLost
)

// answer reads the answer to pr (interim 1xx answers included).
func (f *flow) answer(rb *bufio.Reader, pr *pendingReq, buf *copyBuffer) answerAction {
	for {
		if !headBuffered(rb) {
			return answerLost
		}
		resp, err := http.ReadResponse(rb, &http.Request{Method: pr.method})
		if err != nil {
			return answerLost
		}
		code := resp.StatusCode
		switch {
		case code == http.StatusSwitchingProtocols:
			if !pr.upgrade {
				return answerLost
			}
			pr.verdict <- verdictTunnel
			return answerRaw
		case pr.connect && code/100 == 2:
			pr.verdict <- verdictTunnel
			return answerNext // the tunnel's own answers are followed if it carries HTTP
		case code/100 == 1:
			continue
		}
		// The body is read into buf straight from the tee whenever rb is empty (a read
		// at least rb's size bypasses it), in bulk reads while the answer is large.
		if err := discardBody(resp.Body, buf); err != nil {
			// No Close: it would read the rest of the body first, and after the byte
			// bound or a lost byte that rest may never come.
			return answerLost
		}
		resp.Body.Close()
		if pr.verdict != nil {
			pr.verdict <- verdictHTTP
		}
		return answerNext
	}
}

// headBuffered waits until a whole answer head is in rb's buffer; false when it does not
// fit there (or the destination's side ended first). http.ReadResponse reads a head of
// any size into memory: read only once it is whole, the head costs no more than rb's
// bounded buffer.
func headBuffered(rb *bufio.Reader) bool {
	scanned := 0
	for {
		b, err := rb.Peek(rb.Buffered())
		scan := b[max(0, scanned-2):]
		if bytes.Contains(scan, []byte("\n\n")) || bytes.Contains(scan, []byte("\n\r\n")) {
			return true
		}
		scanned = len(b)
		if err != nil || len(b) == rb.Size() {
			return false
		}
		if _, err := rb.Peek(len(b) + 1); err != nil && err != bufio.ErrBufferFull {
			return false
		}
	}
}

// discardBody reads an answer's body to its end through buf (the tee beneath has passed
// every byte on to the program already).
func discardBody(body io.Reader, buf *copyBuffer) error {
	for {
		k, err := body.Read(buf.bytes())
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		buf.adapt(k)
	}
}

// answersTee reads the destination's side and passes every byte on to the program as it
// is read, before it is parsed. Its first failure is kept and returned from then on: a
// reset read once reads as a clean end the next time, and the parse above it may drop an
// error (an answer it cannot follow); the end of the connection must still be a reset.
type answersTee struct{ f *flow }

func (t answersTee) Read(p []byte) (int, error) {
	f := t.f
	if f.inErr != nil {
		return 0, f.inErr
	}
	n, err := f.up.Read(p)
	if n > 0 {
		if _, werr := f.toProgram().Write(p[:n]); werr != nil {
			f.inErr = werr
			return 0, werr
		}
	}
	if err != nil && err != io.EOF {
		f.inErr = err
	}
	return n, err
}

// rawIn passes the rest of the destination's bytes on unread (those the reader had taken
// are passed on already).
func (f *flow) rawIn() {
	f.setLost()
	if f.inErr != nil {
		f.endIn(f.inErr)
		return
	}
	if f.in.Load() > f.e.lim.MaxBytes {
		// The bound was crossed while an answer was read (the bytes that crossed it were
		// not passed on): the connection ends now, not after the destination's next bytes,
		// which may never come.
		f.endIn(errLimit)
		return
	}
	_, err := copyAll(f.toProgram(), f.up)
	f.endIn(err)
}

// endIn passes the end of the destination's answers on: a clean end as one (half-close),
// the byte bound or a failure of either side as a reset, so a cut answer never looks whole.
func (f *flow) endIn(err error) {
	if err == nil || err == io.EOF {
		err = f.inErr
	}
	switch {
	case err == nil || err == io.EOF:
		halfClose(f.c)
	case errors.Is(err, errLimit):
		f.setReason(egress.ReasonLimit)
		f.closeAll()
	default:
		f.setReason(egress.ReasonReset)
		f.closeAll()
	}
}

// requestPath is a request target's path with the names of its query parameters, never
// their values (records).
func requestPath(target string) string {
	if i := strings.Index(target, "://"); i >= 0 {
		rest := target[i+3:]
		if j := strings.IndexAny(rest, "/?"); j >= 0 {
			target = rest[j:]
		} else {
			target = "/"
		}
	}
	path, query, ok := strings.Cut(target, "?")
	if !ok {
		return ui(path)
	}
	var keys []string
	for _, kv := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k+"=")
	}
	sort.Strings(keys)
	return ui(path + "?" + strings.Join(keys, "&"))
}
