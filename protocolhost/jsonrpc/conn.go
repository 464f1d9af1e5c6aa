// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol/lines"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui/clip"
)

var (
	// ErrTimeout: the plugin did not answer in time.
	ErrTimeout = errors.New("no answer in time")
	// ErrGone: the plugin exited (or closed its stdout) before it answered.
	ErrGone = errors.New("plugin exited")
	// ErrMalformed: the plugin's answer is not what the protocol says.
	ErrMalformed = errors.New("malformed answer")
	// ErrLimit: a bound was hit (a line over the size limit, too many requests in flight).
	ErrLimit = errors.New("limit exceeded")
	// ErrHandshake: the plugin did not complete the initialize handshake.
	ErrHandshake = errors.New("handshake failed")
	// ErrExcluded: the plugin failed its handshake earlier in this invocation.
	ErrExcluded = errors.New("plugin excluded")
)

// RPCError is a JSON-RPC error object a plugin answered with.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, printable(clip.Bytes(e.Message, 80)))
}

// ReasonOf maps an error of this package to its taxonomy code.
func ReasonOf(err error) reason.Code {
	var re *RPCError
	switch {
	case err == nil:
		return reason.OK
	case errors.Is(err, ErrHandshake):
		return reason.HandshakeFailed
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return reason.Timeout
	case errors.Is(err, context.Canceled):
		return reason.Cancelled
	case errors.Is(err, ErrLimit):
		return reason.LimitExceeded
	case errors.Is(err, ErrGone):
		return reason.Crashed
	case errors.Is(err, ErrMalformed), errors.As(err, &re):
		return reason.MalformedMessage
	case errors.Is(err, core.ErrSandbox):
		return reason.SandboxUnavailable
	case errors.Is(err, core.ErrLaunch):
		return reason.LaunchFailed
	case errors.Is(err, ErrExcluded):
		return reason.HandshakeFailed
	}
	return reason.LaunchFailed
}

// maxMalformed is how many unusable lines a plugin may write before it is ended: a few
// stray debug prints are tolerated, a flood is not.
const maxMalformed = 100

// maxExpired bounds how many timed-out request ids are remembered (so their late answers
// are recognised as late rather than as wrong ids).
const maxExpired = 256

type response struct {
	result json.RawMessage
	err    error
}

// conn is the JSON-RPC side of one live plugin process: numbered requests, answers matched
// by id, bounded lines and pending requests.
type conn struct {
	name       string
	proc       *core.Proc
	rec        *core.Recorder
	maxPending int
	lineMax    int
	warn       func(string)

	mu        sync.Mutex
	nextID    int64
	pending   map[int64]chan response
	expired   map[int64]bool
	malformed int
	sample    string
	dead      chan struct{}
	deadErr   error

	writeMu sync.Mutex
}

func newConn(name string, proc *core.Proc, rec *core.Recorder, lineMax, maxPending int, warn func(string)) *conn {
	if maxPending <= 0 {
		maxPending = 64
	}
	c := &conn{
		name: name, proc: proc, rec: rec, maxPending: maxPending, lineMax: lineMax, warn: warn,
		pending: map[int64]chan response{}, expired: map[int64]bool{}, dead: make(chan struct{}),
	}
	go c.readLoop(lines.NewReader(proc.Stdout, lineMax))
	return c
}

// envelope is any message a plugin may write; only answers are expected.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *RPCError       `json:"error"`
}

func (c *conn) readLoop(lr *lines.Reader) {
	for {
		line, n, err := lr.Next()
		if err != nil {
			var le *lines.TooLongError
			if errors.As(err, &le) {
				// A line over the bound cannot be matched to a request; a plugin that writes
				// one is hostile or broken, and every answer after it is suspect.
				c.rec.Record(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
					audit.DetailLimit: "line_max", "line": n, "bytes": le.Length,
				}, false)
				c.fail(fmt.Errorf("%w: line %d is over the %d-byte line limit; plugin ended", ErrLimit, n, c.lineMax))
				_ = c.proc.Kill()
				return
			}
			if errors.Is(err, io.EOF) {
				c.fail(fmt.Errorf("%w: it closed its output", ErrGone))
			} else {
				c.fail(fmt.Errorf("%w: %v", ErrGone, err))
			}
			return
		}
		var env envelope
		if jerr := json.Unmarshal(line, &env); jerr != nil || env.Method != nil || len(env.ID) == 0 {
			why := "not a JSON-RPC answer"
			if jerr != nil {
				why = "not JSON"
			} else if env.Method != nil {
				why = "a request from the plugin (the protocol has none)"
			}
			if c.malformedLine(n, why) {
				return
			}
			continue
		}
		id, ok := parseID(env.ID)
		c.mu.Lock()
		ch := c.pending[id]
		late := c.expired[id]
		if ok && ch != nil {
			delete(c.pending, id)
		}
		if late {
			delete(c.expired, id)
		}
		c.mu.Unlock()
		switch {
		case ok && ch != nil:
			r := response{result: env.Result}
			if env.Error != nil {
				r.err = env.Error
			} else if len(env.Result) == 0 {
				r.err = fmt.Errorf("%w: answer %d has neither result nor error", ErrMalformed, id)
			}
			ch <- r
		case late:
			// The answer to a request that already timed out: dropped, as the spec says.
		default:
			if c.malformedLine(n, "an answer to no pending request (id "+clip.Bytes(string(env.ID), 80)+")") {
				return
			}
		}
	}
}

// malformedLine records an unusable line; past maxMalformed the plugin is ended. It reports
// whether the read loop must stop.
func (c *conn) malformedLine(n int, why string) bool {
	c.mu.Lock()
	c.malformed++
	count := c.malformed
	if count == 1 {
		c.sample = fmt.Sprintf("line %d: %s", n, why)
	}
	c.mu.Unlock()
	if count == 1 {
		c.warn(fmt.Sprintf("plugin %s wrote a line that is %s (line %d); ignored", c.name, why, n))
	}
	if count > maxMalformed {
		c.fail(fmt.Errorf("%w: more than %d unusable lines; plugin ended", ErrMalformed, maxMalformed))
		_ = c.proc.Kill()
		return true
	}
	return false
}

// recordMalformed writes the session's one malformed_lines record, if any line was unusable.
func (c *conn) recordMalformed() {
	c.mu.Lock()
	n, sample := c.malformed, c.sample
	c.mu.Unlock()
	if n > 0 {
		c.rec.Record(audit.EventMalformed, audit.Deny, reason.MalformedMessage, map[string]any{"count": n, "sample": sample}, false)
	}
}

func parseID(raw json.RawMessage) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		raw = []byte(s)
	}
	id, err := strconv.ParseInt(string(raw), 10, 64)
	return id, err == nil
}

// fail ends the connection: every pending request gets err.
func (c *conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.dead:
		return
	default:
	}
	c.deadErr = err
	close(c.dead)
	for id, ch := range c.pending {
		ch <- response{err: err}
		delete(c.pending, id)
	}
}

// Dead is closed when the plugin can answer no more.
func (c *conn) Dead() <-chan struct{} { return c.dead }

func (c *conn) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadErr
}

// hasExpired reports whether a request timed out without an answer (the plugin may be
// stuck in it and not reading).
func (c *conn) hasExpired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.expired) > 0
}

type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// outRequest is a request to a plugin, encoded without a map (fields in the order a map's
// sorted keys had).
type outRequest struct {
	ID      int64  `json:"id"`
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// send writes one request and returns its answer channel. before, if set, runs right
// before the write (the audit sync: no durable record, no request).
func (c *conn) send(method string, params any, deadline time.Time, before func() error) (int64, chan response, error) {
	c.mu.Lock()
	select {
	case <-c.dead:
		c.mu.Unlock()
		return 0, nil, c.deadErr
	default:
	}
	if len(c.pending) >= c.maxPending {
		c.mu.Unlock()
		return 0, nil, fmt.Errorf("%w: %d requests already in flight to plugin %s", ErrLimit, c.maxPending, c.name)
	}
	c.nextID++
	id := c.nextID
	ch := make(chan response, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	msg, err := json.Marshal(outRequest{ID: id, JSONRPC: "2.0", Method: method, Params: params})
	if err == nil && before != nil {
		err = before()
	}
	if err != nil {
		c.forget(id, false)
		return 0, nil, err
	}
	c.writeMu.Lock()
	if wd, ok := c.proc.Stdin.(writeDeadliner); ok {
		_ = wd.SetWriteDeadline(deadline)
	}
	_, err = c.proc.Stdin.Write(append(msg, '\n'))
	c.writeMu.Unlock()
	if err != nil {
		c.forget(id, false)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil, fmt.Errorf("%w: plugin %s is not reading its input", ErrTimeout, c.name)
		}
		return 0, nil, fmt.Errorf("%w: cannot write to it: %v", ErrGone, err)
	}
	return id, ch, nil
}

func (c *conn) forget(id int64, expired bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, id)
	if expired && len(c.expired) < maxExpired {
		c.expired[id] = true
	}
}

// Call sends one request and waits for its answer, at most timeout (and not past ctx).
func (c *conn) Call(ctx context.Context, method string, params any, timeout time.Duration, before func() error) (json.RawMessage, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The bound that applies, for the message: the call's own or the caller's deadline.
	bound := time.Until(deadline)
	id, ch, err := c.send(method, params, deadline, before)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case r := <-ch:
		return r.result, r.err
	case <-t.C:
		c.forget(id, true)
		return nil, fmt.Errorf("%w (%s)", ErrTimeout, bound.Round(100*time.Millisecond))
	case <-ctx.Done():
		c.forget(id, true)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w (%s)", ErrTimeout, bound.Round(100*time.Millisecond))
		}
		return nil, ctx.Err()
	}
}

// closeInput closes the plugin's stdin (EOF), after any write in progress.
func (c *conn) closeInput() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.proc.Stdin.Close()
}

// Notify sends a request without waiting for its answer (shutdown during the ladder).
func (c *conn) Notify(method string, params any) {
	id, _, err := c.send(method, params, time.Now().Add(time.Second), nil)
	if err == nil {
		c.forget(id, true)
	}
}

// printable replaces control characters in plugin text that ends up in fledge's own
// messages (a terminal must never receive a plugin's escape sequences through them).
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}
