// SPDX-License-Identifier: MIT

package egress

import (
	"errors"
	"sync"
)

// ErrSessionClosed: a run asked for a plugin session's network after the session ended.
var ErrSessionClosed = errors.New("the plugin session's network is closed")

// Session is a plugin's network grant by destination, shared by the plugin process and
// every command it runs (sandbox.Spec.Egress): the backend builds one network namespace
// for the first run that carries it, and every later run with the same *Session joins that
// namespace, so a command never gets more network than its plugin. Close ends the
// namespace and its connections (the session's end).
type Session struct {
	Policy *Policy
	Limits Limits

	caOnce sync.Once
	ca     *CA
	caErr  error

	mu      sync.Mutex
	record  func(Event)
	state   any
	closer  func() error
	cleanup []func()
	err     error
	closed  bool
}

// NewSession makes the shared network of one plugin session.
func NewSession(p *Policy, l Limits) *Session { return &Session{Policy: p, Limits: l} }

// CA is the session's certificate authority, made on first use; nil (and no error) when
// the grant has no destination fledge must read (no bound secret, no HTTP rule).
func (e *Session) CA() (*CA, error) {
	e.caOnce.Do(func() {
		if e.Policy == nil {
			return
		}
		if names := e.Policy.InterceptNames(); len(names) > 0 {
			e.ca, e.caErr = NewCA(names)
		}
	})
	return e.ca, e.caErr
}

// SetRecord sets where the session's network records go (the session's audit recorder).
func (e *Session) SetRecord(f func(Event)) {
	e.mu.Lock()
	e.record = f
	e.mu.Unlock()
}

// Record delivers one record (backends call it; safe for concurrent use).
func (e *Session) Record(ev Event) {
	e.mu.Lock()
	f := e.record
	e.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

// State returns the backend's running state, making it with start on first use. A failed
// start is remembered: every later run of the session gets the same error.
func (e *Session) State(start func() (any, func() error, error)) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrSessionClosed
	}
	if e.state != nil || e.err != nil {
		return e.state, e.err
	}
	e.state, e.closer, e.err = start()
	return e.state, e.err
}

// OnClose runs f when the session's network ends (what was made for it alone, such as
// the file of its CA's certificate).
func (e *Session) OnClose(f func()) {
	e.mu.Lock()
	e.cleanup = append(e.cleanup, f)
	e.mu.Unlock()
}

// Close ends the session's network (idempotent).
func (e *Session) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	c, fs := e.closer, e.cleanup
	e.closer, e.closed, e.state, e.cleanup = nil, true, nil, nil
	e.mu.Unlock()
	var err error
	if c != nil {
		err = c()
	}
	for _, f := range fs {
		f()
	}
	return err
}
