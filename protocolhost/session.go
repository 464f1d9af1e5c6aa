package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/pathguard"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

var (
	// ErrLaunch: the plugin could not be started.
	ErrLaunch = errors.New("plugin could not be started")
	// ErrSandbox: a strict policy refused to run without full confinement.
	ErrSandbox = errors.New("sandbox unavailable")
)

// maxConcurrentMetadata bounds metadata requests answered at once (each may run git a few
// times); the rest wait, within the pending-request bound.
const maxConcurrentMetadata = 2

// maxWarnings is how many malformed-line warnings a session prints before it only counts.
const maxWarnings = 5

type session struct {
	tmp    execTmp
	opts   Options
	lim    Limits
	writer *protocol.Writer
	guard  *pathguard.Guard

	ctx    context.Context // cancelled on interrupt or plugin exit
	cancel context.CancelFunc

	pending     atomic.Int64 // id-bearing requests without a reply yet
	execSlots   chan struct{}
	metaSlots   chan struct{} // metadata answers run git: a few at a time, not one per request
	execWaiting atomic.Int64
	prompts     chan func()
	workers     sync.WaitGroup

	interrupted atomic.Bool
	interruptBy atomic.Value // the signal name that interrupted the session (string)
	malformed   atomic.Int64
	warned      atomic.Int64
	skipped     map[string]int
	sample      string // the first skipped line's error, for the malformed_lines record
	skippedMu   sync.Mutex
	auditErrs   atomic.Int64
	repeatMu    sync.Mutex
	repeats     map[string]int
}

// Run runs one plugin session to its end and returns the plugin's exit code.
func Run(ctx context.Context, opts Options) (*Outcome, error) {
	s := &session{opts: opts, lim: opts.Limits.withDefaults(), skipped: map[string]int{}}
	s.execSlots = make(chan struct{}, s.lim.ConcurrentExecs)
	s.metaSlots = make(chan struct{}, maxConcurrentMetadata)
	s.prompts = make(chan func(), s.lim.PendingRequests)
	return s.run(ctx)
}

func (s *session) run(parent context.Context) (*Outcome, error) {
	s.ctx, s.cancel = context.WithCancel(parent)
	defer s.cancel()

	if len(s.opts.ExecRoots) > 0 {
		g, err := pathguard.New(s.opts.ExecRoots...)
		if err != nil {
			return nil, fmt.Errorf("open exec roots: %w", err)
		}
		s.guard = g
		defer g.Close()
	}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{stdinR, stdinW, stdoutR, stdoutW} {
			f.Close()
		}
		return nil, err
	}
	defer stdinW.Close()
	defer stdoutR.Close()
	defer stderrR.Close()

	cwd, err := os.Open(s.opts.PluginCwd)
	if err != nil {
		stdinR.Close()
		stdoutW.Close()
		stderrW.Close()
		return nil, fmt.Errorf("%w: working directory: %v", ErrLaunch, err)
	}
	spec := s.opts.PluginSpec
	spec.Kind = sandbox.KindPlugin
	spec.Name = s.opts.Plugin.Name
	spec.Path = s.opts.Program
	spec.Args = append([]string{s.opts.Program}, s.opts.Args...)
	spec.Dir = cwd
	spec.DirPath = s.opts.PluginCwd
	spec.Stdin = stdinR
	spec.Stdout = stdoutW
	spec.Stderr = stderrW

	s.recordDegraded(spec.Strict)
	// Audit before act, as for an exec: the start decision, with the confinement the plugin
	// is about to get, is on disk before it runs (a denial inside the kernel leaves no fledge
	// record, so the log keeps the profile). No record, no plugin.
	startDetails := map[string]any{
		audit.DetailCommand: s.opts.Command, "program": s.opts.Program, audit.DetailArgv: spec.Args,
		audit.DetailCwdResolved: s.opts.PluginCwd, "grants": s.opts.Grants,
		"profile": map[string]any{
			"network": spec.Network, "unix_sockets": spec.UnixSockets,
			"read_write": spec.Access.ReadWrite, "read_only": spec.Access.ReadOnly,
			"read_exec": spec.Access.ReadExec, "memory_bytes": spec.Limits.MemoryBytes, "pids": spec.Limits.Pids,
		},
	}
	for k, v := range s.opts.PluginStartDetails {
		startDetails[k] = v
	}
	sync, err := s.recordBeforeAct(audit.EventPluginStart, startDetails)
	if err != nil {
		cwd.Close()
		stdinR.Close()
		stdoutW.Close()
		stderrW.Close()
		return nil, fmt.Errorf("%w: the audit log cannot record the start: %v", ErrLaunch, err)
	}
	spec.BeforeExec = sync
	start := time.Now()
	// The plugin process is not tied to ctx: interrupts go through cancel + SIGTERM + SIGKILL
	// so it gets its grace period.
	proc, err := s.pluginSandbox().Start(context.Background(), &spec)
	if sync != nil {
		_ = sync()
	}
	cwd.Close()
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		code := reason.LaunchFailed
		wrapped := fmt.Errorf("%w: %v", ErrLaunch, err)
		if errors.Is(err, sandbox.ErrUnavailable) {
			code = reason.SandboxUnavailable
			wrapped = fmt.Errorf("%w: %v", ErrSandbox, err)
		}
		// The start decision is on record; this says it did not happen.
		s.record(audit.EventPluginExit, audit.Error, code, map[string]any{
			audit.DetailCommand: s.opts.Command, "program": s.opts.Program, "started": false, "error": err.Error(),
		}, true)
		return nil, wrapped
	}

	// Stderr: forwarded live, unchanged, through our pipe: the plugin never holds our tty.
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		dst := s.opts.Stderr
		if dst == nil {
			dst = io.Discard
		}
		buf := make([]byte, 32<<10)
		_, _ = io.CopyBuffer(dst, stderrR, buf)
	}()

	s.writer = protocol.NewWriter(stdinW)
	if err := s.writer.Send(s.initMessage()); err != nil {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s did not accept init: %v", s.opts.Plugin.Name, err))
	}

	// Prompts are serialised on the one terminal.
	go s.promptLoop()

	waitDone := make(chan struct{})
	var res *sandbox.Result
	var waitErr error
	go func() {
		res, waitErr = proc.Wait()
		close(waitDone)
	}()

	sigDone := make(chan struct{})
	go s.watchSignals(proc, waitDone, sigDone)

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		s.readLoop(stdoutR)
	}()

	<-waitDone
	// The plugin is gone: nothing it asked for may outlive it.
	s.cancel()
	close(sigDone)
	select {
	case <-readDone:
	case <-time.After(s.lim.DrainTimeout):
		stdoutR.Close()
		<-readDone
	}
	s.waitWorkers()
	if err := s.tmp.remove(); err != nil {
		s.opts.UI.Warn("removing the execs' temp dir: " + err.Error())
	}
	close(s.prompts)
	select {
	case <-stderrDone:
	case <-time.After(s.lim.DrainTimeout):
		stderrR.Close()
	}

	out := &Outcome{Interrupted: s.interrupted.Load(), Result: res, Malformed: int(s.malformed.Load())}
	details := map[string]any{audit.DetailDurationMS: time.Since(start).Milliseconds(), "plugin_pid": proc.Pid()}
	rc := reason.OK
	decision := audit.Allow
	if waitErr != nil || res == nil {
		out.ExitCode = 126
		rc = reason.Crashed
		decision = audit.Error
		if waitErr != nil {
			details["error"] = waitErr.Error()
		}
	} else {
		out.ExitCode = res.ExitCode
		details[audit.DetailExitCode] = res.ExitCode
		details[audit.DetailSignal] = res.Signal
		if res.Signal != "" {
			rc = reason.Crashed
		}
		if res.Trap != "" { // a WASM module's trap (wasmhost)
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
	if out.Interrupted {
		out.ExitCode = 130
		rc = reason.Cancelled
		details["interrupted_by"], _ = s.interruptBy.Load().(string)
	}
	s.recordSuppressed()
	if n := s.malformed.Load(); n > 0 {
		s.skippedMu.Lock()
		counts := map[string]any{}
		for k, v := range s.skipped {
			counts[k] = v
		}
		sample := s.sample
		s.skippedMu.Unlock()
		s.record(audit.EventMalformed, audit.Deny, reason.MalformedMessage, map[string]any{
			audit.DetailCount: n, "by_kind": counts, audit.DetailSample: sample,
		}, false)
		if n > maxWarnings {
			s.opts.UI.Warn(fmt.Sprintf("plugin %s: %d malformed or unknown lines in total were skipped", s.opts.Plugin.Name, n))
		}
	}
	s.record(audit.EventPluginExit, decision, rc, details, true)
	if n := s.auditErrs.Load(); n > 0 {
		return out, fmt.Errorf("audit log: %d records could not be written", n)
	}
	return out, nil
}

// pluginSandbox starts the plugin: PluginSandbox when set (a WASM runtime), else Sandbox.
func (s *session) pluginSandbox() sandbox.Sandbox {
	if s.opts.PluginSandbox != nil {
		return s.opts.PluginSandbox
	}
	return s.opts.Sandbox
}

// git is how this session runs git for metadata: confined like an exec, read-only.
func (s *session) git() project.Runner {
	return SandboxedGit(s.opts.Sandbox, s.opts.GitAccess)
}

func (s *session) initMessage() protocol.Init {
	args := s.opts.Args
	if args == nil {
		args = []string{}
	}
	in := protocol.Init{
		Type:     protocol.TypeInit,
		Protocol: protocol.Version,
		Command:  s.opts.Command,
		Args:     args,
		Project:  s.opts.InitProject,
		Plugin: protocol.PluginInfo{
			Name: s.opts.Plugin.Name, Version: s.opts.Plugin.Version,
			Dir: s.opts.Plugin.Dir, DataDir: s.opts.Plugin.DataDir,
		},
		Fledge:       protocol.FledgeInfo{Version: s.opts.FledgeVersion},
		Capabilities: s.opts.Grants,
	}
	rep := s.pluginSandbox().Report()
	in.Sandbox = &protocol.SandboxInfo{
		Confinement: rep.Confinement,
		LandlockABI: rep.LandlockABI,
		Cgroup:      rep.CgroupMode,
		Network:     s.opts.PluginSpec.Network,
		Filesystem:  s.opts.Grants.Filesystem,
	}
	return in
}

// watchSignals turns SIGINT/SIGTERM into cancel, then SIGTERM after CancelGrace, then
// SIGKILL after KillAfter. A second signal kills at once.
func (s *session) watchSignals(proc sandbox.Process, exited, done <-chan struct{}) {
	if s.opts.Signals == nil {
		return
	}
	var term, kill <-chan time.Time
	for {
		select {
		case <-done:
			return
		case <-exited:
			return
		case sig := <-s.opts.Signals:
			if s.interrupted.Swap(true) {
				_ = proc.Kill()
				continue
			}
			// Recorded in the session's one plugin_exit record, which is written once the
			// plugin is really gone.
			s.interruptBy.Store(sig.String())
			// Never block the escalation on a plugin that stopped reading its stdin.
			go func() { _ = s.writer.Send(protocol.NewCancel(nil, protocol.CancelUserInterrupt)) }()
			s.cancel()
			term = time.After(s.lim.CancelGrace)
			kill = time.After(s.lim.KillAfter)
		case <-term:
			_ = proc.Signal(syscall.SIGTERM)
			term = nil
		case <-kill:
			_ = proc.Kill()
			kill = nil
		}
	}
}

// waitWorkers waits for in-flight requests, bounded: they were all cancelled already.
func (s *session) waitWorkers() {
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.lim.DrainTimeout):
		s.opts.UI.Warn("some plugin requests were still running at exit and were abandoned")
	}
}

func (s *session) record(event string, d audit.Decision, rc reason.Code, details map[string]any, durable bool) {
	if s.opts.Audit == nil {
		return
	}
	if s.suppress(event, d, rc) {
		return
	}
	if err := s.opts.Audit.Append(s.newRecord(event, d, rc, details), durable); err != nil {
		if s.auditErrs.Add(1) == 1 {
			s.opts.UI.Warn(fmt.Sprintf("audit log write failed: %v", err))
		}
	}
}

// maxRepeatRecords bounds how many records one kind of repeated request (event, decision,
// reason) writes per session; past it they are counted and summed up in one
// audit_suppressed record at the end. A hostile plugin must not be able to fill the disk
// through the audit log by spamming denied stores or execs. Lifecycle records and allowed
// exec decisions are never suppressed: each of those is something that really ran.
const maxRepeatRecords = 1000

func (s *session) suppress(event string, d audit.Decision, rc reason.Code) bool {
	switch event {
	case audit.EventPluginStart, audit.EventPluginExit, audit.EventMalformed, audit.EventSandboxDegraded, audit.EventSuppressed:
		return false
	case audit.EventExecDecision, audit.EventExecOutcome:
		if d == audit.Allow || (event == audit.EventExecOutcome && rc != reason.OK) {
			return false // a command ran
		}
	}
	key := event + "/" + string(d) + "/" + string(rc)
	s.repeatMu.Lock()
	defer s.repeatMu.Unlock()
	if s.repeats == nil {
		s.repeats = map[string]int{}
	}
	s.repeats[key]++
	return s.repeats[key] > maxRepeatRecords
}

// recordSuppressed writes the session's summary of suppressed records, if any.
func (s *session) recordSuppressed() {
	s.repeatMu.Lock()
	over := map[string]any{}
	for k, n := range s.repeats {
		if n > maxRepeatRecords {
			over[k] = n - maxRepeatRecords
		}
	}
	s.repeatMu.Unlock()
	if len(over) > 0 {
		s.record(audit.EventSuppressed, audit.Deny, reason.LimitExceeded, map[string]any{
			audit.DetailLimit: "records_per_kind", audit.DetailLimitValue: maxRepeatRecords, "suppressed": over,
		}, false)
	}
}

// deferredSyncer is an audit log that can write a record now and make it durable later
// (audit.Log does).
type deferredSyncer interface {
	AppendDeferredSync(r *audit.Record) (func() error, error)
}

// recordBeforeAct writes a decision record that must be durable before the act it allows.
// It returns the sync to run right before the act (nil when already durable). An error
// means the record is not written and the act must not happen.
func (s *session) recordBeforeAct(event string, details map[string]any) (func() error, error) {
	if s.opts.Audit == nil {
		return nil, nil
	}
	r := s.newRecord(event, audit.Allow, reason.OK, details)
	if ds, ok := s.opts.Audit.(deferredSyncer); ok {
		return ds.AppendDeferredSync(r)
	}
	return nil, s.opts.Audit.Append(r, true)
}

func (s *session) newRecord(event string, d audit.Decision, rc reason.Code, details map[string]any) *audit.Record {
	rep := s.opts.Sandbox.Report()
	return &audit.Record{
		Session:  s.opts.SessionID,
		Event:    event,
		Decision: d,
		Reason:   string(rc),
		Details:  details,
		Plugin: &audit.PluginRef{
			Name: s.opts.Plugin.Name, Version: s.opts.Plugin.Version,
			Source: s.opts.Plugin.Source, ManifestDigest: s.opts.Plugin.ManifestDigest,
		},
		Sandbox: &audit.SandboxInfo{Mode: rep.Confinement, LandlockABI: rep.LandlockABI, CgroupMode: rep.CgroupMode},
	}
}

func (s *session) warnSkipped(err error) {
	s.malformed.Add(1)
	var le *protocol.LineError
	kind := "read"
	if errors.As(err, &le) {
		kind = le.Kind.String()
	}
	s.skippedMu.Lock()
	s.skipped[kind]++
	if s.sample == "" {
		s.sample = clip(err.Error())
	}
	s.skippedMu.Unlock()
	if s.warned.Add(1) <= maxWarnings {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: %v", s.opts.Plugin.Name, err))
	}
}

// recordDegraded records, once per session, what the sandbox cannot enforce here: with a
// strict policy the start is refused (deny), else the plugin runs with less (error).
func (s *session) recordDegraded(strict bool) {
	rep := s.opts.Sandbox.Report()
	if len(rep.Warnings) == 0 && rep.Confinement != "none" {
		return
	}
	d := audit.Error
	if strict {
		d = audit.Deny
	}
	missing := rep.Warnings
	if missing == nil {
		missing = []string{}
	}
	s.record(audit.EventSandboxDegraded, d, reason.SandboxUnavailable, map[string]any{
		audit.DetailMissing: missing, "confinement": rep.Confinement, "strict": strict,
	}, false)
}

// displayPath shortens p for messages.
func displayPath(p string) string { return filepath.Clean(p) }
