package sandbox

import (
	"sync"

	"github.com/fledgehq/fledge/egress"
)

// Egress is a plugin's network grant by destination, shared by the plugin process and
// every command it runs: the backend builds one network namespace for the first run that
// carries it, and every later run with the same *Egress joins that namespace, so a command
// never gets more network than its plugin. Spec.Network must be false beside it (true is
// the whole network). Close ends the namespace and its connections (the session's end).
type Egress struct {
	Policy *egress.Policy
	Limits egress.Limits

	mu     sync.Mutex
	record func(egress.Event)
	state  any
	closer func() error
	err    error
	closed bool
}

// NewEgress makes the shared network of one plugin session.
func NewEgress(p *egress.Policy, l egress.Limits) *Egress { return &Egress{Policy: p, Limits: l} }

// SetRecord sets where the session's network records go (the session's audit recorder).
func (e *Egress) SetRecord(f func(egress.Event)) {
	e.mu.Lock()
	e.record = f
	e.mu.Unlock()
}

// Record delivers one record (backends call it; safe for concurrent use).
func (e *Egress) Record(ev egress.Event) {
	e.mu.Lock()
	f := e.record
	e.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

// State returns the backend's running state, making it with start on first use. A failed
// start is remembered: every later run of the session gets the same error.
func (e *Egress) State(start func() (any, func() error, error)) (any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrEgressClosed
	}
	if e.state != nil || e.err != nil {
		return e.state, e.err
	}
	e.state, e.closer, e.err = start()
	return e.state, e.err
}

// Close ends the session's network (idempotent).
func (e *Egress) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	c := e.closer
	e.closer, e.closed, e.state = nil, true, nil
	e.mu.Unlock()
	if c != nil {
		return c()
	}
	return nil
}
