// SPDX-License-Identifier: MIT

// Package invokev1 is the invoke-v1 adapter (Dify-style invoke_id plugins): a long-lived plugin that says
// plugin_ready, then answers requests keyed by invoke_id with info lines, streamed
// plugin_response chunks and a plugin_invoke_end marker, many at once, over its stdio or
// (transport = "tcp") over a loopback socket it announces. It runs on the session core
// (spawn, audit, ladder) and offers the plugin's [[tools]] to the tools catalogue.
package invokev1

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol/lines"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
	"github.com/fledgehq/fledge/ui/clip"
)

// Message types of Dify-style invoke_id plugins.
const (
	TypeInfo     = "info"
	TypeReady    = "plugin_ready"
	TypeResponse = "plugin_response"
	TypeEnd      = "plugin_invoke_end"
	TypeError    = "error"
)

// TimeoutMessage is the error text of a request that ran out of time (the protocol's prefix).
const TimeoutMessage = "execution timeout exceeded"

// Defaults of the bounds that policy does not set.
const (
	DefaultChunksPerRequest = 100_000
	DefaultBytesPerRequest  = 256 << 20
	// DefaultStreamBuffer is how many messages of one request wait for their consumer; past
	// it the reader waits (backpressure), so a fast plugin cannot grow the host's memory.
	DefaultStreamBuffer = 16
	// exitGrace: after its input is closed a plugin has this long to exit on its own.
	exitGrace = 2 * time.Second
	// connectTimeout bounds the connection to a TCP plugin's announced port.
	connectTimeout = 5 * time.Second
)

// ErrInvoke is wrapped by every *Failure.
var ErrInvoke = errors.New("invoke-v1 plugin failed")

// Failure is a failure of fledge's taxonomy (reason.Failure), wrapping ErrInvoke.
type Failure = reason.Failure

func fail(code reason.Code, format string, a ...any) *Failure {
	return &Failure{Code: code, Msg: fmt.Sprintf(format, a...), Of: ErrInvoke}
}

// Message is one line from the plugin.
type Message struct {
	InvokeID string          `json:"invoke_id"`
	Type     string          `json:"type"`
	Response json.RawMessage `json:"response,omitempty"`
}

// Request is one line to the plugin.
type Request struct {
	InvokeID string          `json:"invoke_id"`
	Type     string          `json:"type"`
	Action   string          `json:"action"`
	Request  json.RawMessage `json:"request"`
}

// Limits bound one session beyond policy's line length and requests in flight.
type Limits struct {
	ChunksPerRequest int   // plugin_response chunks of one request
	BytesPerRequest  int64 // bytes of one request's messages
	InFlight         int   // requests open at once (0: policy's pending_requests)
	StreamBuffer     int   // messages of one request waiting for their consumer
}

func (l Limits) withDefaults(pending int) Limits {
	if l.ChunksPerRequest <= 0 {
		l.ChunksPerRequest = DefaultChunksPerRequest
	}
	if l.BytesPerRequest <= 0 {
		l.BytesPerRequest = DefaultBytesPerRequest
	}
	if l.InFlight <= 0 {
		l.InFlight = pending
	}
	if l.InFlight <= 0 {
		l.InFlight = 256
	}
	if l.StreamBuffer <= 0 {
		l.StreamBuffer = DefaultStreamBuffer
	}
	return l
}

// Options start one session.
type Options struct {
	Host    *tools.Host
	Binding *core.Binding
	Limits  Limits
}

// prefixes are the protocol's error prefixes: what kind of failure a plugin's error names.
var prefixes = []struct {
	prefix string
	kind   string
	code   reason.Code
}{
	{"decode plugin file error", "plugin file error", reason.LaunchFailed},
	{"read plugin file error", "plugin file error", reason.LaunchFailed},
	{"get declaration error", "manifest error", reason.LaunchFailed},
	{"initialize python environment error", "environment error", reason.LaunchFailed},
	{"plugin runtime failed", "runtime error", reason.Crashed},
	{TimeoutMessage, "timeout", reason.Timeout},
	{"unmarshal json failed", "malformed request", reason.MalformedMessage},
}

// Classify names the kind of a plugin's error message by the protocol's prefixes, and the
// reason code it stands for ("" and reason.OK when it has none of them: the plugin's own
// failure).
func Classify(msg string) (kind string, code reason.Code) {
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p.prefix) {
			return p.kind, p.code
		}
	}
	return "", reason.OK
}

// Event is one message of a request, as delivered to its consumer.
type Event struct {
	InvokeID string          `json:"invoke_id"`
	Type     string          `json:"type"`
	Response json.RawMessage `json:"response"`
}

// Outcome is how one request ended.
type Outcome struct {
	InvokeID string
	Chunks   int
	Bytes    int64
	// Failure is set when the request failed for a reason of fledge's (timeout, crashed,
	// limit_exceeded, malformed_response, launch_failed, ...).
	Failure *Failure
	// PluginError is the plugin's own error for the request (reason ok: the tool failed).
	PluginError string
}

type request struct {
	id      string
	ch      chan Event
	gone    chan struct{} // closed when the consumer stopped listening
	failed  chan struct{} // closed by failure
	failure *Failure
	chunks  int
	bytes   int64
	once    sync.Once
}

func (r *request) fail(f *Failure) {
	r.once.Do(func() {
		r.failure = f
		close(r.failed)
	})
}

type startEvent struct {
	kind string // ready, error, hostport, eof, malformed
	msg  string
	host string
	port int
}

// Session is one running invoke-v1 plugin.
type Session struct {
	b       *core.Binding
	h       *tools.Host
	rec     *core.Recorder
	proc    *core.Proc
	prof    policy.Profile
	lim     Limits
	timeout time.Duration
	name    string

	wmu  sync.Mutex
	w    io.Writer
	conn net.Conn

	mu     sync.Mutex
	open   map[string]*request
	ready  bool
	dead   *Failure
	start  chan startEvent
	hpSent bool
	slots  chan struct{}
	nextID atomic.Int64
	late   atomic.Int64
	bad    atomic.Int64
	closed sync.Once
	exit   *core.Exit
}

// Start starts the plugin and waits for plugin_ready (policy's startup timeout). Info lines
// are shown on the host's stderr and recorded; an error line before ready is a launch
// failure carrying the plugin's message.
func Start(ctx context.Context, o Options) (*Session, *Failure) {
	b, h := o.Binding, o.Host
	env := h.Env
	name := b.Entry.Name
	if len(b.Manifest.Commands) == 0 {
		return nil, fail(reason.LaunchFailed, "plugin %s declares no command to run", name)
	}
	program, err := env.Program(b, b.Manifest.Commands[0].Binary)
	if err != nil {
		return nil, fail(reason.LaunchFailed, "plugin %s: %v", name, err)
	}
	log, err := env.Audit()
	if err != nil {
		return nil, fail(reason.LaunchFailed, "plugin %s not started: %v", name, err)
	}
	tcp := b.Manifest.Plugin.Transport == "tcp"
	l, f := planLaunch(env, b, program, tcp)
	if f != nil {
		return nil, f
	}
	prof, spec := l.prof, l.spec
	timeout, terr := policy.CallTimeout(b.Manifest.Plugin.Timeout, prof.Session)
	s := &Session{b: b, h: h, prof: prof, lim: o.Limits.withDefaults(prof.Session.PendingRequests), timeout: timeout, name: name,
		open: map[string]*request{}, start: make(chan startEvent, 8)}
	if terr != nil {
		s.warn(terr.Error())
	}
	s.slots = make(chan struct{}, s.lim.InFlight)
	s.rec = env.NewRecorder(log, b.Ref, s.warn)
	cwd := b.StartDir("", prof.Plugin.Access)
	proc, err := core.Spawn(core.SpawnOptions{
		Sandbox: env.Sandbox, Spec: spec, Cwd: cwd, Pipes: true, Stderr: h.Stderr, Recorder: s.rec,
		StartDetails: map[string]any{"protocol": plugin.ProtocolInvoke, "transport": transportName(tcp), "grants": b.Entry.Granted},
		Ladder:       core.Ladder{CancelGrace: prof.Session.CancelGrace, KillAfter: prof.Session.KillAfter},
		DrainTimeout: prof.Session.DrainTimeout,
	})
	if err != nil {
		return nil, fail(core.LaunchReason(err), "plugin %s: %v", name, err) // err says why, once
	}
	s.proc, s.w = proc, proc.Stdin
	go s.read(proc.Stdout, "stdout")
	go func() {
		<-proc.Done()
		res, _ := proc.Wait()
		s.die(fail(reason.Crashed, "plugin %s: exited (%s)", name, describeExit(res)))
	}()

	if f := s.awaitReady(ctx, l, program); f != nil {
		return nil, f
	}
	return s, nil
}

// launch is what planLaunch decides: the profile, the sandbox spec and, for a TCP plugin,
// its port and whether it lives in its own network namespace.
type launch struct {
	prof    policy.Profile
	spec    sandbox.Spec
	tcp     bool
	port    uint16
	inNetns bool
}

// planLaunch builds the plugin's profile and spec. A TCP plugin's port is chosen first and
// the profile built again with FLEDGE_LISTEN_PORT in its environment.
func planLaunch(env *core.Env, b *core.Binding, program string, tcp bool) (launch, *Failure) {
	name := b.Entry.Name
	pluginEnv := map[string]string{"FLEDGE_PLUGIN": name, "FLEDGE_DATA_DIR": b.Paths.PluginDataDir, "FLEDGE_PROTOCOL": plugin.ProtocolInvoke}
	// A TCP plugin without network lives in its own network namespace (where the sandbox
	// has one) and may bind only the port fledge chose for it.
	prof := env.Profile(b, os.Environ(), pluginEnv, nil)
	inNetns := tcp && !prof.Plugin.Network && strings.Contains(env.Sandbox.Report().NetworkDeny, "netns")
	var port uint16
	if tcp {
		var err error
		if port, err = pickPort(inNetns); err != nil {
			return launch{}, fail(reason.LaunchFailed, "plugin %s: choosing its port: %v", name, err)
		}
		pluginEnv["FLEDGE_LISTEN_PORT"] = strconv.Itoa(int(port))
		if prof.Plugin.Egress != nil {
			// The first profile's network is never used: what was made for it (its CA's
			// bundle file) goes now.
			_ = prof.Plugin.Egress.Close()
		}
		prof = env.Profile(b, os.Environ(), pluginEnv, nil)
	}
	spec := prof.Plugin
	spec.Kind, spec.Name, spec.Path, spec.Args = sandbox.KindPlugin, name, program, []string{program}
	if tcp && !spec.Network {
		spec.ListenTCP = []uint16{port}
		// In its own network namespace any loopback port is harmless (nothing else lives
		// there and only fledge, entering it, connects): a plugin written for the Dify-style
		// TCP mode binds port 0 or a port of its own and announces it. Without a namespace
		// it is held to FLEDGE_LISTEN_PORT.
		spec.ListenAnyTCP = inNetns
	}
	return launch{prof: prof, spec: spec, tcp: tcp, port: port, inNetns: inNetns}, nil
}

// awaitReady waits for plugin_ready within policy's startup timeout. Any other ending
// (an error line, a bad announcement, EOF, the timeout, a cancel) is recorded as a failed
// start and the plugin is shut down.
func (s *Session) awaitReady(ctx context.Context, l launch, program string) *Failure {
	b, env, name, spec := s.b, s.h.Env, s.name, l.spec
	startup := l.prof.Session.StartupTimeout
	if startup <= 0 {
		startup = 30 * time.Second
	}
	timer := time.NewTimer(startup)
	defer timer.Stop()
	for {
		var f *Failure
		select {
		case ev := <-s.start:
			switch ev.kind {
			case TypeReady:
				if l.tcp && s.conn == nil {
					f = fail(reason.LaunchFailed, "plugin %s said it is ready before announcing its host and port", name)
					break
				}
				s.mu.Lock()
				s.ready = true
				s.mu.Unlock()
				return nil
			case TypeError:
				kind, _ := Classify(ev.msg)
				if kind == "" {
					kind = "startup error"
				}
				f = fail(reason.LaunchFailed, "plugin %s failed to start (%s): %s", name, kind, clip.Bytes(ev.msg, 300))
			case "hostport":
				f = s.connect(ev.host, ev.port, l.port, spec.ListenTCP != nil && !spec.ListenAnyTCP, l.inNetns)
			case "malformed":
				f = fail(reason.LaunchFailed, "plugin %s sent a malformed line while starting: %s", name, ev.msg)
			case "eof":
				f = fail(reason.LaunchFailed, "plugin %s ended before it was ready (%s)", name, ev.msg)
				if hint := env.InterpreterHint(b.Paths, program, spec.Access); hint != "" {
					f.Msg += ": " + hint
				}
			}
		case <-timer.C:
			f = fail(reason.LaunchFailed, "plugin %s was not ready within %s", name, startup)
		case <-ctx.Done():
			f = fail(reason.Cancelled, "plugin %s: start cancelled", name)
		}
		if f != nil {
			s.rec.Record(audit.EventPluginStart, audit.Error, f.Code, map[string]any{"protocol": plugin.ProtocolInvoke, "message": f.Msg, "ready": false}, true)
			s.die(f)
			s.shutdown(true)
			return f
		}
	}
}

func transportName(tcp bool) string {
	if tcp {
		return "tcp"
	}
	return "stdio"
}

func describeExit(res *sandbox.Result) string {
	switch {
	case res == nil:
		return "status unknown"
	case res.Signal != "":
		return "killed by " + res.Signal
	}
	return fmt.Sprintf("status %d", res.ExitCode)
}

// connect checks the announced address and connects to it: loopback only; the chosen port
// when the sandbox restricts binding to it.
func (s *Session) connect(host string, port int, chosen uint16, restricted, inNetns bool) *Failure {
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil || !ip.IsLoopback() {
		return fail(reason.LaunchFailed, "plugin %s announced host %q: refused, a TCP plugin must listen on loopback", s.name, clip.Bytes(host, 300))
	}
	if port <= 0 || port > 65535 || (restricted && port != int(chosen)) {
		return fail(reason.LaunchFailed, "plugin %s announced port %d, but may listen only on port %d (FLEDGE_LISTEN_PORT)", s.name, port, chosen)
	}
	if restricted && !inNetns {
		if a := exposedListener(port); a != "" {
			return fail(reason.LaunchFailed, "plugin %s listens on %s: refused, a TCP plugin must listen on loopback", s.name, a)
		}
	}
	conn, err := dialPlugin(s.proc.Pid(), inNetns, &net.TCPAddr{IP: ip, Port: port}, connectTimeout)
	if err != nil {
		return fail(reason.LaunchFailed, "plugin %s: connecting to %s: %v", s.name, net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	// conn is read under mu (by the readers) and w under wmu (by senders).
	s.wmu.Lock()
	s.mu.Lock()
	s.conn, s.w = conn, conn
	s.mu.Unlock()
	s.wmu.Unlock()
	go s.read(conn, "socket")
	return nil
}

// pickPort chooses the TCP plugin's port: any port in its own network namespace (nothing
// else lives there), else a port free on the host's loopback now.
func pickPort(inNetns bool) (uint16, error) {
	if inNetns {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		return 20000 + binary.BigEndian.Uint16(b[:])%40000, nil
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port), nil
}

func (s *Session) warn(msg string) {
	if s.h.Stderr != nil {
		fmt.Fprintf(s.h.Stderr, "fledge: warning: %s\n", ui.Sanitize(msg))
	}
}

func (s *Session) signalStart(ev startEvent) {
	select {
	case s.start <- ev:
	default: // startup is over, or already has its answer
	}
}

// read reads one source of lines (the plugin's stdout, or its socket) until it ends.
func (s *Session) read(rd io.Reader, src string) {
	lr := lines.NewReader(rd, s.prof.Session.LineMax)
	for {
		line, n, err := lr.Next()
		if err != nil {
			if errors.Is(err, lines.ErrTooLong) {
				s.malformed(fmt.Sprintf("%s line %d is longer than %d bytes", src, n, s.prof.Session.LineMax))
				continue
			}
			msg := "its " + src + " ended"
			if !errors.Is(err, io.EOF) {
				msg = fmt.Sprintf("reading its %s: %v", src, err)
			}
			s.signalStart(startEvent{kind: "eof", msg: msg})
			// In TCP mode the socket is the protocol; the plugin's stdout ending alone
			// (a plugin that closed it) does not end the session.
			s.mu.Lock()
			viaSocket := s.conn != nil
			s.mu.Unlock()
			if src == "socket" || !viaSocket {
				// Say how the plugin ended when it is ending.
				select {
				case <-s.proc.Done():
					res, _ := s.proc.Wait()
					msg = "exited (" + describeExit(res) + ")"
				case <-time.After(exitGrace):
				}
				s.die(fail(reason.Crashed, "plugin %s: %s", s.name, msg))
			}
			return
		}
		s.handle(line, src)
	}
}

func (s *Session) malformed(why string) {
	s.bad.Add(1)
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if !ready {
		s.signalStart(startEvent{kind: "malformed", msg: why})
		return
	}
	// Nobody can tell which request a broken line belonged to: every open one fails.
	s.failAll(fail(reason.MalformedResponse, "plugin %s sent a malformed line: %s", s.name, why))
}

func (s *Session) handle(line []byte, src string) {
	var m Message
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		s.malformed("not one complete JSON object")
		return
	}
	if err := json.Unmarshal(line, &m); err != nil {
		s.malformed("unexpected field types: " + err.Error())
		return
	}
	if m.InvokeID == "" {
		s.system(m)
		return
	}
	s.mu.Lock()
	r := s.open[m.InvokeID]
	if s.conn != nil && src != "socket" {
		// In TCP mode requests are answered over the socket; stdout only carries the
		// plugin's own info and errors. (One reader per request keeps its counts exact.)
		r = nil
	}
	s.mu.Unlock()
	if r == nil {
		s.late.Add(1) // a request that already ended (timeout, failure) or never existed
		return
	}
	switch m.Type {
	case TypeInfo, TypeResponse, TypeEnd, TypeError:
	default:
		s.finish(r, fail(reason.MalformedResponse, "plugin %s sent type %q for request %s", s.name, clip.Bytes(m.Type, 300), r.id))
		return
	}
	r.bytes += int64(len(line))
	if m.Type == TypeResponse {
		r.chunks++
	}
	switch {
	case r.chunks > s.lim.ChunksPerRequest:
		s.finish(r, fail(reason.LimitExceeded, "request %s: more than %d chunks", r.id, s.lim.ChunksPerRequest))
		return
	case r.bytes > s.lim.BytesPerRequest:
		s.finish(r, fail(reason.LimitExceeded, "request %s: more than %d bytes", r.id, s.lim.BytesPerRequest))
		return
	}
	resp := m.Response
	if len(resp) == 0 {
		resp = json.RawMessage("{}")
	}
	ev := Event{InvokeID: m.InvokeID, Type: m.Type, Response: resp}
	if m.Type == TypeEnd || m.Type == TypeError {
		// The request is over: later lines for it are stragglers.
		s.mu.Lock()
		delete(s.open, r.id)
		s.mu.Unlock()
	}
	select {
	case r.ch <- ev:
	case <-r.gone:
	case <-r.failed:
	}
}

// system handles a message without invoke_id: startup lines, and errors for everyone.
func (s *Session) system(m Message) {
	var body struct {
		Info  string `json:"info"`
		Error string `json:"error"`
		Host  string `json:"host"`
		Port  *int   `json:"port"`
	}
	_ = json.Unmarshal(m.Response, &body)
	switch m.Type {
	case TypeInfo:
		s.showInfo(body.Info)
		if body.Host != "" || body.Port != nil {
			s.mu.Lock()
			first := !s.hpSent && s.b.Manifest.Plugin.Transport == "tcp"
			s.hpSent = true
			s.mu.Unlock()
			if first {
				p := 0
				if body.Port != nil {
					p = *body.Port
				}
				s.signalStart(startEvent{kind: "hostport", host: body.Host, port: p})
			}
		}
	case TypeReady:
		s.showInfo(body.Info)
		s.signalStart(startEvent{kind: TypeReady})
	case TypeError:
		s.mu.Lock()
		ready := s.ready
		s.mu.Unlock()
		if !ready {
			s.signalStart(startEvent{kind: TypeError, msg: body.Error})
			return
		}
		_, code := Classify(body.Error)
		if code == reason.OK || code == reason.LaunchFailed {
			code = reason.Crashed
		}
		s.failAll(fail(code, "plugin %s failed: %s", s.name, clip.Bytes(body.Error, 300)))
	default:
		s.bad.Add(1)
	}
}

func (s *Session) showInfo(info string) {
	if info == "" {
		return
	}
	if s.h.Stderr != nil {
		fmt.Fprintf(s.h.Stderr, "plugin %s: %s\n", s.name, ui.Sanitize(clip.Bytes(info, 300)))
	}
	s.rec.Record(audit.EventPluginInfo, audit.Allow, reason.OK, map[string]any{"info": clip.Bytes(info, 300)}, false)
}

func (s *Session) failAll(f *Failure) {
	s.mu.Lock()
	open := make([]*request, 0, len(s.open))
	for _, r := range s.open {
		open = append(open, r)
	}
	s.open = map[string]*request{}
	s.mu.Unlock()
	for _, r := range open {
		r.fail(f)
	}
}

// die marks the session unusable and fails every open request.
func (s *Session) die(f *Failure) {
	s.mu.Lock()
	if s.dead == nil {
		s.dead = f
	}
	s.mu.Unlock()
	s.failAll(f)
}

func (s *Session) finish(r *request, f *Failure) {
	s.mu.Lock()
	delete(s.open, r.id)
	s.mu.Unlock()
	r.fail(f)
}

// Alive reports whether the session can take requests.
func (s *Session) Alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead == nil
}

func (s *Session) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if d, ok := s.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	_, err = s.w.Write(append(b, '\n'))
	return err
}

// Invoke sends one request and streams its messages to sink as they arrive (info,
// plugin_response chunks, then plugin_invoke_end or error), within the request timeout and
// the session's bounds. The decision is on record before the request is sent, the outcome
// after it ended.
// CheckRequest refuses a request without its access type or action (both required by the
// protocol): malformed_message, a request fledge cannot accept.
func CheckRequest(typ, action string) *Failure {
	switch {
	case strings.TrimSpace(typ) == "":
		return fail(reason.MalformedMessage, "an invoke-v1 request needs its access type (type: tool, model, ...)")
	case strings.TrimSpace(action) == "":
		return fail(reason.MalformedMessage, "an invoke-v1 request needs its action (invoke_tool, invoke_llm, ...)")
	}
	return nil
}

func (s *Session) Invoke(ctx context.Context, typ, action string, req json.RawMessage, sink func(Event) error) *Outcome {
	id := fmt.Sprintf("fledge-%d", s.nextID.Add(1))
	out := &Outcome{InvokeID: id}
	if len(req) == 0 {
		req = json.RawMessage("{}")
	}
	details := map[string]any{"protocol": plugin.ProtocolInvoke, "invoke_id": id, "type": typ, "action": action, "request_bytes": len(req)}
	if s.b.Manifest.Plugin.Transport == "tcp" {
		details["transport"] = "tcp"
	}
	if f := s.admit(typ, action, details); f != nil {
		out.Failure = f
		return out
	}
	defer func() { <-s.slots }()
	r := &request{id: id, ch: make(chan Event, s.lim.StreamBuffer), gone: make(chan struct{}), failed: make(chan struct{})}
	started := time.Now()
	defer func() {
		close(r.gone)
		s.mu.Lock()
		delete(s.open, id)
		s.mu.Unlock()
		s.recordOutcome(out, time.Since(started))
	}()
	sync, err := s.rec.BeforeAct(audit.EventInvokeRequest, details)
	if err == nil && sync != nil {
		err = sync()
	}
	if err != nil {
		out.Failure = fail(reason.LaunchFailed, "the request was not sent: the audit log cannot record it: %v", err)
		return out
	}
	s.mu.Lock()
	s.open[id] = r
	s.mu.Unlock()
	if err := s.send(Request{InvokeID: id, Type: typ, Action: action, Request: req}); err != nil {
		s.mu.Lock()
		dead := s.dead
		s.mu.Unlock()
		if dead == nil {
			dead = fail(reason.Crashed, "plugin %s did not take the request: %v", s.name, err)
		}
		out.Failure = dead
		return out
	}
	s.await(ctx, r, out, sink)
	return out
}

// admit refuses a request before it is sent (recording the denial): an empty type or
// action, a dead plugin, or one more than the in-flight bound. Otherwise it has taken a
// slot, which the caller gives back.
func (s *Session) admit(typ, action string, details map[string]any) *Failure {
	if f := CheckRequest(typ, action); f != nil {
		// Both are required (the seed): an empty one is refused, never sent as a request
		// the plugin would have to guess about.
		s.rec.Record(audit.EventInvokeRequest, audit.Deny, f.Code, details, true)
		return f
	}
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead != nil {
		s.rec.Record(audit.EventInvokeRequest, audit.Deny, dead.Code, details, true)
		return dead
	}
	select {
	case s.slots <- struct{}{}:
		return nil
	default:
		f := fail(reason.LimitExceeded, "%d requests are already in flight (the bound)", s.lim.InFlight)
		details["limit"], details["limit_value"] = "requests_in_flight", s.lim.InFlight
		s.rec.Record(audit.EventInvokeRequest, audit.Deny, reason.LimitExceeded, details, true)
		return f
	}
}

// await passes the request's events to sink until it ends, fails, times out or is
// cancelled, counting them into out.
func (s *Session) await(ctx context.Context, r *request, out *Outcome, sink func(Event) error) {
	id := r.id
	timeout := s.timeout
	if d, ok := tools.CallTimeout(ctx); ok {
		timeout = d // the caller's --timeout, already within policy's maximum
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev := <-r.ch:
			s.count(ev, out)
			if err := sink(ev); err != nil {
				out.Failure = fail(reason.Cancelled, "the request's output could not be delivered: %v", err)
				return
			}
			if ev.Type == TypeEnd || ev.Type == TypeError {
				return
			}
		case <-r.failed:
			out.Failure = r.failure
			return
		case <-timer.C:
			out.Failure = fail(reason.Timeout, "%s (request %s, %s)", TimeoutMessage, id, timeout)
			return
		case <-ctx.Done():
			out.Failure = fail(reason.Cancelled, "request %s cancelled", id)
			return
		}
	}
}

// count adds one event to out: its chunk and bytes and, for an error event, either a
// failure fledge classifies or the plugin's own error message.
func (s *Session) count(ev Event, out *Outcome) {
	if ev.Type == TypeResponse {
		out.Chunks++
	}
	out.Bytes += int64(len(ev.Response))
	if ev.Type != TypeError {
		return
	}
	var body struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(ev.Response, &body)
	if _, code := Classify(body.Error); code != reason.OK {
		out.Failure = fail(code, "plugin %s: %s", s.name, clip.Bytes(body.Error, 300))
	} else {
		out.PluginError = body.Error
		if out.PluginError == "" {
			out.PluginError = "the plugin reported an error without a message"
		}
	}
}

func (s *Session) recordOutcome(out *Outcome, d time.Duration) {
	details := map[string]any{"protocol": plugin.ProtocolInvoke, "invoke_id": out.InvokeID, "chunks": out.Chunks,
		"bytes": out.Bytes, audit.DetailDurationMS: d.Milliseconds()}
	switch {
	case out.Failure != nil:
		details["message"] = out.Failure.Msg
		if out.Failure.Code == reason.LimitExceeded {
			details["limit_value"] = map[string]any{"chunks": s.lim.ChunksPerRequest, "bytes": s.lim.BytesPerRequest}
		}
		s.rec.Record(audit.EventInvokeOutcome, audit.Error, out.Failure.Code, details, true)
	case out.PluginError != "":
		details["message"] = clip.Bytes(out.PluginError, 300)
		s.rec.Record(audit.EventInvokeOutcome, audit.Error, reason.ToolError, details, true)
	default:
		s.rec.Record(audit.EventInvokeOutcome, audit.Allow, reason.OK, details, true)
	}
}

// Close ends the session: the plugin's input (and socket) is closed, it has a moment to
// exit, then the ladder ends it. It returns how the plugin ended.
func (s *Session) Close() *core.Exit {
	s.shutdown(false)
	return s.exit
}

func (s *Session) shutdown(now bool) {
	s.closed.Do(func() {
		s.die(fail(reason.Cancelled, "plugin %s: session closed", s.name))
		s.wmu.Lock()
		if s.conn != nil {
			_ = s.conn.Close()
		}
		s.wmu.Unlock()
		_ = s.proc.Stdin.Close()
		if now {
			s.proc.Stop("host", false, nil)
			_ = s.proc.Kill()
		} else {
			select {
			case <-s.proc.Done():
			case <-time.After(exitGrace):
				s.proc.Stop("host", false, nil)
			}
		}
		s.exit = s.proc.Finish(map[string]any{"protocol": plugin.ProtocolInvoke, "late_lines": s.late.Load(), "malformed_lines": s.bad.Load()})
	})
}

// openCount is how many requests are open (tests).
func (s *Session) openCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}
