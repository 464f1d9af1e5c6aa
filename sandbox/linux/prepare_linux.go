// SPDX-License-Identifier: MIT

package linux

import (
	"time"

	"github.com/fledgehq/fledge/sandbox"
)

// Prepare starts in the background what a session's first Start would otherwise wait for
// in line, so that it overlaps the caller's own work (the audit log's opening, the
// profile, the plugin_start record and its fsync).
//
// With a nil spec or no name: the host-death watchdog (an exec of fledge, several
// milliseconds) and a pid-namespace holder for the first name that asks (a fork, under a
// millisecond, on amd64; an exec of fledge elsewhere); with a nil spec, the egress probe too. With a name: the
// same, and, where v1 controllers are in use, a spare in the run's groups with spec's
// limits (its join waits for an RCU grace period). Nothing is skipped: Start finds the
// watchdog running, takes the holder once it is ready (a holder no name ever had), and
// takes the spare only if it fits its spec exactly; what is not ready it does itself, as
// before. Close ends all of it, ready or not.
func (s *Sandbox) Prepare(spec *sandbox.Spec) {
	if s.guard.available() {
		go func() { _ = s.guard.ensure() }()
	}
	if s.view && !s.userView {
		s.pidns.prestart()
	}
	if spec == nil {
		// The egress probe (a network namespace and a TUN device, 1-2 ms, decided once per
		// process) that the session's first Report asks for: made beside the plugin's bind
		// and profile instead of in line before its recorder.
		go func() { _ = s.proxyEgress() }()
	}
	if spec == nil || spec.Name == "" {
		return
	}
	if s.launch == LaunchThread && len(s.cg.v1) > 0 && s.cg.writable() {
		s.prepareSpare(spec.Name, spec.Limits)
	}
}

// firstSpare is the spare Prepare makes for a session's first run: that run waits for it
// (bounded) instead of joining groups of its own, since it is already paying the join's
// grace period. Later runs take a spare only if one is ready, as before.
type firstSpare struct {
	name   string
	limits sandbox.Limits
	done   chan struct{} // closed once it is ready, or could not be made
}

// firstSpareWait bounds how long the first run waits for the spare being made for it.
const firstSpareWait = time.Second

// prepareSpare makes the first run's spare in the background, unless a spare is ready or
// being made already.
func (s *Sandbox) prepareSpare(name string, limits sandbox.Limits) {
	s.spares.mu.Lock()
	if s.spares.making || s.spares.closed || s.spares.ready != nil || s.spares.first != nil {
		s.spares.mu.Unlock()
		return
	}
	f := &firstSpare{name: name, limits: limits, done: make(chan struct{})}
	s.spares.making, s.spares.first = true, f
	s.spares.pending.Add(1)
	s.spares.mu.Unlock()
	go func() {
		defer s.spares.pending.Done()
		defer close(f.done)
		// A session's first runs launch from threads (its launcher comes later): a threaded spare.
		sp := s.newSpare(name, limits, false, false)
		s.spares.mu.Lock()
		s.spares.making = false
		if sp != nil && !s.spares.closed && s.spares.ready == nil {
			s.spares.ready, sp = sp, nil
		}
		s.spares.mu.Unlock()
		if sp != nil {
			s.disposeSpare(sp, true)
		}
	}()
}

// awaitFirstSpare waits, once, for the spare Prepare is making for spec's run.
func (s *Sandbox) awaitFirstSpare(spec *sandbox.Spec) {
	s.spares.mu.Lock()
	f := s.spares.first
	if f != nil && f.name == spec.Name && sameLimits(f.limits, spec.Limits) {
		s.spares.first = nil
	} else {
		f = nil
	}
	s.spares.mu.Unlock()
	if f == nil {
		return
	}
	t := time.NewTimer(firstSpareWait)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
	}
}

var _ sandbox.Preparer = (*Sandbox)(nil)

// earlyHolder starts a pid-namespace holder at the beginning of New when a run follows at
// once (Options.Prestart) and root may have pid namespaces: its exec then overlaps New's
// probes. New hands it to its namespaces (pidNamespaces.adopt), or ends it where they turn
// out unavailable.
func earlyHolder(opts Options, root bool) *aheadStart {
	if !opts.Prestart || !root || opts.DisablePidNS || opts.Launch == LaunchStub {
		return nil
	}
	exe := newGuard(opts.StubPath).exe
	if exe == "" {
		return nil
	}
	return startAhead(exe)
}
