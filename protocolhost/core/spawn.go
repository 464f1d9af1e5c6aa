// SPDX-License-Identifier: MIT

// Package core is the session core every plugin protocol shares: it starts the plugin
// process under the sandbox profile policy built, with "audit before act"; pumps its stderr;
// runs the cancel, SIGTERM, SIGKILL ladder; and records how the session ended, through one
// Recorder per session. A protocol adapter (protocolhost for fledge-v1, the legacy runner,
// and the others) only reads and writes its messages and decides what each one means.
package core

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/egress"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

var (
	// ErrLaunch: the plugin could not be started.
	ErrLaunch = errors.New("plugin could not be started")
	// ErrSandbox: a strict policy refused to run without full confinement. It is the
	// sandbox's own sentinel, so the refusal the sandbox wrote ("sandbox unavailable: why")
	// is passed on as it is and says it once.
	ErrSandbox = sandbox.ErrUnavailable
	// ErrAudit: the audit log could not record the start, so nothing was started.
	ErrAudit = errors.New("the audit log cannot record the start")
)

// Ladder is how a session ends a plugin that was told to stop: the protocol's cancel
// first, SIGTERM after CancelGrace, SIGKILL (the whole tree) after KillAfter.
type Ladder struct {
	CancelGrace time.Duration
	KillAfter   time.Duration
}

// DefaultLadder is the spec's: SIGTERM 5 s after cancel, SIGKILL after 10 s.
var DefaultLadder = Ladder{CancelGrace: 5 * time.Second, KillAfter: 10 * time.Second}

// SpawnOptions say what to start and how.
type SpawnOptions struct {
	Sandbox sandbox.Sandbox
	// Report is Sandbox.Report() when the caller asked it already (nil: Spawn asks).
	Report *sandbox.Report
	// Spec is the plugin's sandbox profile with Kind, Name, Path and Args set. Dir and
	// DirPath are set from Cwd. With Pipes, Stdin and Stdout are set by Spawn.
	Spec sandbox.Spec
	Cwd  string
	// Pipes connects the plugin's stdin and stdout to Proc.Stdin and Proc.Stdout (every
	// protocol adapter). Without it Spec.Stdin/Stdout are used as given (legacy plugins).
	Pipes bool
	// Stderr receives the plugin's stderr, forwarded live through a pipe (the plugin never
	// holds the caller's terminal). Nil discards it.
	Stderr   io.Writer
	Recorder *Recorder
	// StartDetails go into the plugin_start record, beside the program, argv, cwd and the
	// profile, which Spawn adds.
	StartDetails map[string]any
	Ladder       Ladder
	// DrainTimeout bounds how long Finish waits for stderr after the plugin exited.
	DrainTimeout time.Duration
	// Warn writes a host warning for the user (nil: "fledge: " and the line on os.Stderr,
	// through ui.HostLine: the warning quotes plugin-chosen text).
	Warn func(string)
}

// Proc is a started plugin process.
type Proc struct {
	Stdin  io.WriteCloser // nil without Pipes
	Stdout io.ReadCloser  // nil without Pipes

	proc   sandbox.Process
	egress sandbox.Egress // the session's network, closed by Finish (nil: none)
	rec    *Recorder
	warn   func(string)
	ladder Ladder
	drain  time.Duration
	start  time.Time

	done       chan struct{}
	res        *sandbox.Result
	waitErr    error
	stderrR    *os.File
	stderrDone chan struct{}

	stopMu    sync.Mutex
	stopped   bool
	stopBy    string
	userStop  bool
	stopTimer []*time.Timer
}

// Spawn starts the plugin. The plugin_start decision, with the profile the plugin is about
// to get, is durable before it runs: no record, no plugin. A start that fails after that is
// recorded as a plugin_exit with started=false.
func Spawn(o SpawnOptions) (*Proc, error) {
	p, err := spawn(o)
	if err != nil {
		// The session's network ends with the plugin that could not start (egress.go).
		closeEgress(o.Spec.Egress)
	}
	return p, err
}

func spawn(o SpawnOptions) (*Proc, error) {
	if o.Ladder.CancelGrace <= 0 || o.Ladder.KillAfter <= 0 {
		o.Ladder = DefaultLadder
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 5 * time.Second
	}
	rec := o.Recorder
	if rec == nil {
		rec = NewRecorder(nil, "", nil, sandbox.Report{}, nil)
	}
	spec := o.Spec
	// The Deny rule (fledge's config, state and audit log are never reachable) is checked
	// here for every backend, not only where the kernel layer would refuse the spec.
	if err := policy.CheckAccess(spec.Access); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	if s, ok := spec.Egress.(*egress.Session); ok && s != nil {
		s.SetRecord(netRecorder(rec)) // core/egress.go
	}
	warn := o.Warn
	if warn == nil {
		warn = func(m string) { _ = ui.HostLine(os.Stderr, "fledge: "+m) } // sanitised on a terminal
	}
	p := &Proc{egress: spec.Egress, rec: rec, warn: warn, ladder: o.Ladder, drain: o.DrainTimeout, done: make(chan struct{}), stderrDone: make(chan struct{})}
	closeAfter, keep, err := p.openFiles(&o, &spec)
	if err != nil {
		return nil, err
	}

	details := startDetails(&o, &spec, rec)
	// The record is written while the sandbox prepares the start (its cgroups, view and
	// filters), and the launch waits for it, written and synced, right before the plugin
	// runs (BeforeExec): a record that cannot be written fails the launch there.
	started := rec.BeforeActAsync(audit.EventPluginStart, details)
	spec.BeforeExec = started.Durable
	rec.ObserveKernel(&spec, "")
	p.start = time.Now()
	// The plugin is not tied to a context: ending it goes through the ladder, so it gets
	// its grace period.
	proc, err := o.Sandbox.Start(context.Background(), &spec)
	if aerr := started.Durable(); aerr != nil {
		// No durable record, no plugin: the launch stopped at BeforeExec (a backend that
		// started it anyway has its plugin killed here, before anything reads from it). A
		// record written but not synced is rolled back by the log: no plugin_exit either.
		if err == nil {
			_ = proc.Kill()
			_, _ = proc.Wait()
		}
		closeFiles(closeAfter)
		closeFiles(keep)
		return nil, fmt.Errorf("%w: %w: %w", ErrLaunch, ErrAudit, aerr)
	}
	closeFiles(closeAfter)
	if err != nil {
		closeFiles(keep)
		return nil, launchFailed(rec, &spec, err)
	}
	p.proc = proc
	go p.pumpStderr(o.Stderr)
	go p.waitExit(proc)
	return p, nil
}

// closeFiles closes every file of fs.
func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// openFiles opens what the plugin gets as its stdio and working directory and puts them in
// spec (and fledge's ends in p). closeAfter are the plugin's ends, closed once it started;
// keep are fledge's. On an error everything opened is closed again.
func (p *Proc) openFiles(o *SpawnOptions, spec *sandbox.Spec) (closeAfter, keep []*os.File, err error) {
	if o.Pipes {
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrLaunch, err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			closeFiles([]*os.File{inR, inW})
			return nil, nil, fmt.Errorf("%w: %w", ErrLaunch, err)
		}
		spec.Stdin, spec.Stdout = inR, outW
		closeAfter = append(closeAfter, inR, outW)
		keep = append(keep, inW, outR)
		p.Stdin, p.Stdout = inW, outR
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(closeAfter)
		closeFiles(keep)
		return nil, nil, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	spec.Stderr = errW
	closeAfter = append(closeAfter, errW)
	keep = append(keep, errR)
	p.stderrR = errR

	cwd, err := os.Open(o.Cwd)
	if err != nil {
		closeFiles(closeAfter)
		closeFiles(keep)
		return nil, nil, fmt.Errorf("%w: working directory: %w", ErrLaunch, err)
	}
	closeAfter = append(closeAfter, cwd)
	spec.Dir, spec.DirPath = cwd, o.Cwd
	return closeAfter, keep, nil
}

// startDetails records what the sandbox cannot enforce here and returns the plugin_start
// record's details: the program, argv, cwd and profile, and the caller's StartDetails.
func startDetails(o *SpawnOptions, spec *sandbox.Spec, rec *Recorder) map[string]any {
	var rep sandbox.Report
	if o.Report != nil {
		rep = *o.Report
	} else {
		rep = o.Sandbox.Report()
	}
	rec.Degraded(rep, spec.Strict)
	details := map[string]any{
		"program": spec.Path, audit.DetailArgv: spec.Args, audit.DetailCwdResolved: o.Cwd,
		"profile": ProfileDetails(spec),
	}
	for k, v := range o.StartDetails {
		details[k] = v
	}
	return details
}

// launchFailed records that a start already on record did not happen (and a strict
// policy's refusal as a refusal) and returns the error Spawn gives.
func launchFailed(rec *Recorder, spec *sandbox.Spec, err error) error {
	code := reason.LaunchFailed
	wrapped := fmt.Errorf("%w: %w", ErrLaunch, err)
	if errors.Is(err, ErrSandbox) {
		code = reason.SandboxUnavailable
		wrapped = err // already "sandbox unavailable: why"
	}
	// The start decision is on record; this says it did not happen.
	rec.Record(audit.EventPluginExit, audit.Error, code, map[string]any{
		"program": spec.Path, "started": false, "error": err.Error(),
	}, true)
	if code == reason.SandboxUnavailable && rec.log != nil {
		// A strict policy refused to run here: on file as a refusal, like any other.
		_ = audit.RecordRefusal(rec.log, audit.Refusal{
			Session: rec.session, Plugin: rec.plugin, Sandbox: rec.sb,
			Kind: audit.RefusalSandboxUnavailable, Message: err.Error(),
		})
	}
	return wrapped
}

// pumpStderr forwards the plugin's stderr to w until it closes; it runs on its own
// goroutine so the plugin never blocks writing to it.
func (p *Proc) pumpStderr(w io.Writer) {
	defer close(p.stderrDone)
	// Whatever the adapter passed: a terminal gets the plugin's bytes only sanitised.
	dst, flush := ui.PluginStream(w)
	if dst == nil {
		dst = io.Discard
	}
	buf := make([]byte, 32<<10)
	if _, err := io.CopyBuffer(dst, p.stderrR, buf); err != nil {
		// The user's stderr is gone (its reader closed): the plugin's stderr is still
		// read, so a plugin writing to it never blocks on the way to its end.
		_, _ = io.CopyBuffer(io.Discard, p.stderrR, buf)
	}
	flush()
}

// waitExit waits for the plugin's end, stops the ladder's timers and closes p.done.
func (p *Proc) waitExit(proc sandbox.Process) {
	p.res, p.waitErr = proc.Wait()
	p.stopMu.Lock()
	for _, t := range p.stopTimer {
		t.Stop()
	}
	p.stopMu.Unlock()
	close(p.done)
}

// LaunchReason is the reason code of an error of Spawn: sandbox_unavailable when a strict
// policy refused the run, else launch_failed.
func LaunchReason(err error) reason.Code {
	if errors.Is(err, ErrSandbox) {
		return reason.SandboxUnavailable
	}
	return reason.LaunchFailed
}

// The network a run gets, as its record says it (profile.network).
const (
	NetworkAll          = "all"          // every destination (a network = true grant, or policy)
	NetworkDestinations = "destinations" // only those of network_to, through fledge
	NetworkNone         = "none"         // no network
)

// NetworkMode is what network spec gives the run: all, the destinations of its egress
// session (network_to), or none. One word, so the record cannot say "no network" beside
// the destinations it reaches.
func NetworkMode(spec *sandbox.Spec) string {
	switch {
	case spec.Network:
		return NetworkAll
	case len(networkTo(spec)) > 0:
		return NetworkDestinations
	}
	return NetworkNone
}

// secretNames are the granted secrets the run receives, by name (never a value; [] for none).
func secretNames(spec *sandbox.Spec) []string {
	return append([]string{}, spec.SecretNames...)
}

// ProfileDetails is the part of a plugin_start record that says what the plugin may reach.
func ProfileDetails(spec *sandbox.Spec) map[string]any {
	return map[string]any{
		"network": NetworkMode(spec), "network_to": networkTo(spec), "secrets": secretNames(spec), "listen_tcp": spec.ListenTCP, "listen_any_tcp": spec.ListenAnyTCP, "unix_sockets": spec.UnixSockets,
		"read_write": spec.Access.ReadWrite, "read_only": spec.Access.ReadOnly,
		"read_exec": spec.Access.ReadExec, "memory_bytes": spec.Limits.MemoryBytes, "pids": spec.Limits.Pids,
	}
}

// Pid of the plugin process.
func (p *Proc) Pid() int { return p.proc.Pid() }

// Done is closed once the plugin and every process of its tree are gone.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Signal sends sig to the plugin's main process.
func (p *Proc) Signal(sig os.Signal) error { return p.proc.Signal(sig) }

// Kill ends the plugin's whole tree now.
func (p *Proc) Kill() error { return p.proc.Kill() }

// Stop runs the ladder: notify (the protocol's cancel, run in its own goroutine so a
// plugin that stopped reading cannot block the escalation), SIGTERM after CancelGrace,
// SIGKILL after KillAfter. by names the cause for the plugin_exit record; userInterrupt
// marks a Ctrl+C/SIGTERM of the user (exit status 130). A second Stop kills at once.
func (p *Proc) Stop(by string, userInterrupt bool, notify func()) {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	if p.stopped {
		_ = p.proc.Kill()
		return
	}
	p.stopped, p.stopBy, p.userStop = true, by, userInterrupt
	if notify != nil {
		go notify()
	}
	p.stopTimer = append(p.stopTimer,
		time.AfterFunc(p.ladder.CancelGrace, func() { _ = p.proc.Signal(syscall.SIGTERM) }),
		time.AfterFunc(p.ladder.KillAfter, func() { _ = p.proc.Kill() }))
}

// Interrupt is the user's Ctrl+C: Stop (cancel, then SIGTERM and SIGKILL as the ladder
// says) and, at once, SIGINT to the plugin's process group, as the terminal would have sent
// it had the plugin been on it. A plugin written for a host that leaves it on the terminal
// stops there, before it can take a cancelled question as an empty answer and go on to its
// next step; one that handles SIGINT (or ignores it) still gets the cancel and the ladder.
// A second interrupt kills at once (Stop's rule).
func (p *Proc) Interrupt(by string, notify func()) {
	p.stopMu.Lock()
	first := !p.stopped
	p.stopMu.Unlock()
	p.Stop(by, true, notify)
	if !first {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	if in, ok := p.proc.(sandbox.Interrupter); ok {
		_ = in.Interrupt()
		return
	}
	_ = p.proc.Signal(os.Interrupt)
}

// Stopping reports whether Stop was called.
func (p *Proc) Stopping() bool {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	return p.stopped
}

// WatchSignals turns the endings of a run from sigs into the session's end until the
// plugin is gone or done is closed: SIGINT (Ctrl+C), SIGHUP (the terminal went away) and
// SIGPIPE (the reader of fledge's output went away) into Interrupt, as the terminal's
// Ctrl+C; SIGTERM into Stop. Each is a user interrupt, with notify; a second signal kills
// at once.
func (p *Proc) WatchSignals(sigs <-chan os.Signal, done <-chan struct{}, notify func()) {
	if sigs == nil {
		return
	}
	for {
		select {
		case <-p.done:
			return
		case <-done:
			return
		case sig := <-sigs:
			switch sig {
			case os.Interrupt, syscall.SIGHUP, syscall.SIGPIPE:
				p.Interrupt(sig.String(), notify)
			default:
				p.Stop(sig.String(), true, notify)
			}
		}
	}
}

// Exit is how a plugin session ended.
type Exit struct {
	Code        int // the plugin's exit status; 130 after a user interrupt; 126 when unknown
	Interrupted bool
	StoppedBy   string // the cause given to Stop, "" if the plugin ended by itself
	Result      *sandbox.Result
}

// Wait waits for the plugin to be gone and returns its result.
func (p *Proc) Wait() (*sandbox.Result, error) {
	<-p.done
	return p.res, p.waitErr
}

// Finish waits for the plugin to be gone, drains its stderr (bounded), writes the
// session's suppression summary and its plugin_exit record (with extra details), and says
// how it ended.
func (p *Proc) Finish(extra map[string]any) *Exit {
	<-p.done
	// The session's network ends with its plugin (its commands are gone by now).
	closeEgress(p.egress)
	select {
	case <-p.stderrDone:
	case <-time.After(p.drain):
		p.stderrR.Close()
		<-p.stderrDone
	}
	p.stderrR.Close()
	if p.Stdout != nil {
		p.Stdout.Close()
	}
	if p.Stdin != nil {
		p.Stdin.Close()
	}
	p.stopMu.Lock()
	by, user := p.stopBy, p.userStop
	p.stopMu.Unlock()

	ex := &Exit{Result: p.res, StoppedBy: by, Interrupted: user}
	details := map[string]any{audit.DetailDurationMS: time.Since(p.start).Milliseconds(), "plugin_pid": p.proc.Pid()}
	rc, decision := reason.OK, audit.Allow
	res := p.res
	if p.waitErr != nil || res == nil {
		ex.Code, rc, decision = 126, reason.Crashed, audit.Error
		if p.waitErr != nil {
			details["error"] = p.waitErr.Error()
		}
	} else {
		ex.Code = res.ExitCode
		details[audit.DetailExitCode] = res.ExitCode
		details[audit.DetailSignal] = res.Signal
		if res.Signal != "" {
			rc = reason.Crashed
		}
		if res.Trap != "" { // a WASM module's trap (package wasm)
			details["trap"] = res.Trap
			rc = reason.Crashed
		}
		if res.TimedOut {
			details[audit.DetailTimedOut] = true
			rc = reason.Timeout
		}
		if res.OOMKilled {
			rc = reason.OOMKilled
		}
		details[audit.DetailOOMKilled] = res.OOMKilled
		details[audit.DetailProcsKilled] = res.Killed
		details[audit.DetailPeakMemory] = res.PeakMemory
	}
	switch {
	case user:
		ex.Code, rc = 130, reason.Cancelled
		details["interrupted_by"] = by
	case by != "":
		details["stopped_by"] = by
		if by == string(reason.Timeout) && rc != reason.OOMKilled {
			rc = reason.Timeout
		}
	}
	for k, v := range extra {
		details[k] = v
	}
	if res != nil && len(res.Quarantined) > 0 {
		details["git_quarantined"] = len(res.Quarantined)
		for _, w := range p.rec.Quarantined(res.Quarantined) {
			p.warn(w)
		}
	}
	p.rec.Close()
	details["denied"], details["errors"] = p.rec.Counts()
	p.rec.Record(audit.EventPluginExit, decision, rc, details, true)
	return ex
}
