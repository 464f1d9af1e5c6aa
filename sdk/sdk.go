// SPDX-License-Identifier: MIT

// Package sdk is the Go SDK for fledge plugin authors. It speaks fledge-v1 over stdin/stdout
// (the Go counterpart of the Rust fledge host SDK's PluginIO): it receives init, sends output, logs
// and progress, and turns prompts, store/load, exec and metadata into blocking calls that
// take a context.
//
//	p, err := sdk.New()
//	if err != nil { log.Fatal(err) }
//	target, err := p.Prompt(ctx, "Deploy target:", sdk.PromptDefault("staging"))
//
// A Plugin is safe for use from many goroutines: request ids are allocated atomically and a
// background reader routes each response to its caller. Once New has returned, the Plugin
// owns stdout: anything else printed there reaches fledge as a malformed line (skipped with a
// warning). Write debug output to stderr, which fledge passes through.
package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/fledgehq/fledge/protocol"
)

// DefaultMaxPending bounds the requests a Plugin has in flight at once.
const DefaultMaxPending = 1024

var (
	// ErrCancelled matches every *CancelError.
	ErrCancelled = errors.New("sdk: cancelled by fledge")
	// ErrClosed: fledge closed the plugin's stdin (or it failed) while a call waited.
	ErrClosed = errors.New("sdk: connection to fledge closed")
	// ErrNoInit: the stream ended before fledge sent init (not running under fledge?).
	ErrNoInit = errors.New("sdk: no init message from fledge")
	// ErrTooManyPending: more than MaxPending requests in flight.
	ErrTooManyPending = errors.New("sdk: too many requests in flight")
	// ErrBadResponse: a response whose value does not fit the request.
	ErrBadResponse = errors.New("sdk: unexpected response value")
)

// CancelError is returned by a blocking call that fledge cancelled: that one request (ID set)
// or the whole session (ID empty). errors.Is(err, ErrCancelled) is true.
type CancelError struct {
	Reason string // protocol.Cancel* reasons, e.g. "timeout", "user_interrupt", "non_interactive"
	ID     string // the request's id; empty for a session-wide cancel
}

func (e *CancelError) Error() string {
	what := "session"
	if e.ID != "" {
		what = "request " + e.ID
	}
	if e.Reason == "" {
		return "sdk: " + what + " cancelled by fledge"
	}
	return "sdk: " + what + " cancelled by fledge: " + e.Reason
}

// Is makes errors.Is(err, ErrCancelled) true.
func (e *CancelError) Is(target error) bool { return target == ErrCancelled }

// Option configures a Plugin.
type Option func(*config)

type config struct {
	maxPending int
	maxLine    int
	warn       io.Writer
}

// WithMaxPending bounds the requests in flight (default DefaultMaxPending).
func WithMaxPending(n int) Option { return func(c *config) { c.maxPending = n } }

// WithMaxLine bounds one line received from fledge. The default, protocol.DefaultMaxWriteLine,
// is fledge's own bound on what it writes: an exec result may carry 2 x 10 MiB of output, and
// a reply skipped as too long would leave its caller waiting forever.
func WithMaxLine(n int) Option { return func(c *config) { c.maxLine = n } }

// WithWarnings sets where the SDK reports lines it skipped (New: stderr; NewIO: nowhere).
func WithWarnings(w io.Writer) Option { return func(c *config) { c.warn = w } }

type result struct {
	value json.RawMessage
	err   error
}

// Plugin is one plugin's connection to fledge.
type Plugin struct {
	r    *protocol.Reader
	w    *protocol.Writer
	init *protocol.Init
	cfg  config

	nextID atomic.Uint64

	mu           sync.Mutex
	pending      map[string]chan result
	closedErr    error // set when the reader stops
	cancelErr    *CancelError
	cancelled    chan struct{}
	done         chan struct{}
	cancelReason string
}

// New connects to fledge and waits for init: over stdin and stdout for a native plugin, over
// the fledge host functions (send, recv) in a WASM plugin built with GOOS=wasip1. Skipped
// lines are reported on stderr.
func New(opts ...Option) (*Plugin, error) {
	r, w := transport()
	return Connect(context.Background(), r, w, append([]Option{WithWarnings(os.Stderr)}, opts...)...)
}

// NewIO connects over r (what fledge writes) and w (what fledge reads), and waits for init.
func NewIO(r io.Reader, w io.Writer, opts ...Option) (*Plugin, error) {
	return Connect(context.Background(), r, w, opts...)
}

// Connect is NewIO with a context bounding the wait for init. If ctx ends first, Connect
// returns its error and leaves a goroutine blocked on r until r yields or is closed.
func Connect(ctx context.Context, r io.Reader, w io.Writer, opts ...Option) (*Plugin, error) {
	cfg := config{maxPending: DefaultMaxPending, maxLine: protocol.DefaultMaxWriteLine, warn: io.Discard}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxPending <= 0 {
		cfg.maxPending = DefaultMaxPending
	}
	if cfg.warn == nil {
		cfg.warn = io.Discard
	}
	p := &Plugin{
		r:         protocol.NewReader(r, protocol.ReaderOptions{MaxLine: cfg.maxLine, Inbound: true}),
		w:         protocol.NewWriter(w),
		cfg:       cfg,
		pending:   make(map[string]chan result),
		cancelled: make(chan struct{}),
		done:      make(chan struct{}),
	}
	type initResult struct {
		init *protocol.Init
		err  error
	}
	got := make(chan initResult, 1)
	go func() {
		in, err := p.awaitInit()
		got <- initResult{in, err}
		if err == nil {
			p.readLoop()
		}
	}()
	select {
	case res := <-got:
		if res.err != nil {
			return nil, res.err
		}
		p.init = res.init
		return p, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("sdk: waiting for init: %w", ctx.Err())
	}
}

// awaitInit reads until init. Responses before init answer nothing and are dropped; a
// cancel before init ends the session before it starts.
func (p *Plugin) awaitInit() (*protocol.Init, error) {
	for {
		m, err := p.r.Next()
		if errors.Is(err, protocol.ErrSkipped) {
			p.warnf("%v", err)
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil, ErrNoInit
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoInit, err)
		}
		switch {
		case m.Init != nil:
			return m.Init, nil
		case m.Cancel != nil:
			return nil, &CancelError{Reason: m.Cancel.Reason, ID: idKey(m.Cancel.ID)}
		}
	}
}

func (p *Plugin) warnf(format string, args ...any) {
	fmt.Fprintf(p.cfg.warn, "fledge sdk: "+format+"\n", args...)
}

// readLoop routes inbound messages until the stream ends.
func (p *Plugin) readLoop() {
	for {
		m, err := p.r.Next()
		if errors.Is(err, protocol.ErrSkipped) {
			p.warnf("%v", err)
			continue
		}
		if err != nil {
			cause := ErrClosed
			if !errors.Is(err, io.EOF) {
				cause = fmt.Errorf("%w: %w", ErrClosed, err)
			}
			p.closeAll(cause)
			return
		}
		switch {
		case m.Response != nil:
			p.deliver(idKey(m.Response.ID), result{value: m.Response.Value})
		case m.Cancel != nil && len(m.Cancel.ID) > 0:
			key := idKey(m.Cancel.ID)
			p.deliver(key, result{err: &CancelError{Reason: m.Cancel.Reason, ID: key}})
		case m.Cancel != nil:
			p.cancelSession(m.Cancel.Reason)
		}
		// Anything else (a second init, types from a newer fledge) is ignored: spec invariant 8.
	}
}

func (p *Plugin) deliver(key string, res result) {
	p.mu.Lock()
	ch, ok := p.pending[key]
	delete(p.pending, key)
	p.mu.Unlock()
	if !ok {
		// A late answer to a call whose context ended, or an id we never sent.
		return
	}
	ch <- res // buffered, one slot, one sender: never blocks
}

func (p *Plugin) cancelSession(reason string) {
	p.mu.Lock()
	if p.cancelErr != nil {
		p.mu.Unlock()
		return
	}
	p.cancelErr = &CancelError{Reason: reason}
	p.cancelReason = reason
	waiting := p.pending
	p.pending = make(map[string]chan result)
	close(p.cancelled)
	p.mu.Unlock()
	for _, ch := range waiting {
		ch <- result{err: p.cancelErr}
	}
}

func (p *Plugin) closeAll(cause error) {
	p.mu.Lock()
	p.closedErr = cause
	waiting := p.pending
	p.pending = make(map[string]chan result)
	close(p.done)
	p.mu.Unlock()
	for _, ch := range waiting {
		ch <- result{err: cause}
	}
}

// idKey normalizes an id for routing: a JSON string by its value, a number by its text.
func idKey(raw protocol.ID) string {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// Init returns the init message fledge sent.
func (p *Plugin) Init() *protocol.Init { return p.init }

// Command returns the plugin command being run (init.command).
func (p *Plugin) Command() string { return p.init.Command }

// Args returns the command-line arguments after the command name.
func (p *Plugin) Args() []string { return p.init.Args }

// Cancelled is closed when fledge cancels the whole session (Ctrl+C, a timeout). The plugin
// should clean up and exit promptly: fledge sends SIGTERM 5 seconds later.
func (p *Plugin) Cancelled() <-chan struct{} { return p.cancelled }

// CancelReason is the reason of the session-wide cancel, or "" if none came.
func (p *Plugin) CancelReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cancelReason
}

// Done is closed when the connection from fledge ends (stdin closed or failed).
func (p *Plugin) Done() <-chan struct{} { return p.done }

// send writes one fire-and-forget message.
func (p *Plugin) send(v any) error {
	if err := p.w.Send(v); err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	return nil
}

// call sends a request built around a fresh id and waits for its response.
func (p *Plugin) call(ctx context.Context, build func(id protocol.ID) any) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := strconv.FormatUint(p.nextID.Add(1), 10)
	ch := make(chan result, 1)
	p.mu.Lock()
	switch {
	case p.cancelErr != nil:
		err := p.cancelErr
		p.mu.Unlock()
		return nil, err
	case p.closedErr != nil:
		err := p.closedErr
		p.mu.Unlock()
		return nil, err
	case len(p.pending) >= p.cfg.maxPending:
		p.mu.Unlock()
		return nil, fmt.Errorf("%w (limit %d)", ErrTooManyPending, p.cfg.maxPending)
	}
	p.pending[key] = ch
	p.mu.Unlock()

	if err := p.send(build(protocol.StringID(key))); err != nil {
		p.forget(key)
		return nil, err
	}
	select {
	case res := <-ch:
		return res.value, res.err
	case <-ctx.Done():
		p.forget(key)
		return nil, ctx.Err()
	}
}

func (p *Plugin) forget(key string) {
	p.mu.Lock()
	delete(p.pending, key)
	p.mu.Unlock()
}

func decodeValue[T any](raw json.RawMessage, what string) (T, error) {
	var v T
	if len(raw) == 0 || string(raw) == "null" {
		return v, fmt.Errorf("%w: %s answered with null", ErrBadResponse, what)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("%w: %s: %w", ErrBadResponse, what, err)
	}
	return v, nil
}
