// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/pathguard"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui/clip"
)

var (
	// ErrLaunch: the plugin could not be started (wraps core.ErrLaunch).
	ErrLaunch = core.ErrLaunch
	// ErrSandbox: a strict policy refused to run without full confinement.
	ErrSandbox = core.ErrSandbox
)

// maxConcurrentMetadata bounds metadata requests answered at once (each may run git a few
// times); the rest wait, within the pending-request bound.
const maxConcurrentMetadata = 2

// maxWarnings is how many malformed-line warnings a session prints before it only counts.
const maxWarnings = 5

type session struct {
	// budgetWarn tells the user once that the session's audit log budget refuses execs.
	budgetWarn sync.Once
	tmp        execTmp
	opts       Options
	lim        Limits
	writer     *protocol.Writer
	guard      *pathguard.Guard

	ctx    context.Context // cancelled on interrupt or plugin exit
	cancel context.CancelFunc

	pending     atomic.Int64 // id-bearing requests without a reply yet
	execSlots   chan struct{}
	metaSlots   chan struct{} // metadata answers run git: a few at a time, not one per request
	execWaiting atomic.Int64
	prompts     chan func()
	workers     sync.WaitGroup

	malformed atomic.Int64
	warned    atomic.Int64
	skipped   map[string]int
	sample    string // the first skipped line's error, for the malformed_lines record
	skippedMu sync.Mutex
	rec       *core.Recorder
	proc      *core.Proc
	// execMode is the sandbox mode every exec of the session is about to get (its
	// decision records it): the backend's report is a doctor's survey of the machine
	// (Linux: it builds a network namespace to see whether it can), made once.
	execMode     map[string]any
	execModeOnce sync.Once
	// pluginRep is the plugin sandbox's Report, asked once per session.
	pluginRep sandbox.Report
}

// Run runs one plugin session to its end and returns the plugin's exit code.
func Run(ctx context.Context, opts Options) (*Outcome, error) {
	s := &session{opts: opts, lim: withDefaults(opts.Limits), skipped: map[string]int{}}
	// What the plugin's sandbox enforces here, asked once: the plugin_start record, the
	// init message and (the same sandbox) the recorder all say it.
	s.pluginRep = s.pluginSandbox().Report()
	s.rec = opts.Recorder
	if s.rec == nil {
		var ui func(string)
		if opts.UI != nil {
			ui = opts.UI.Warn
		}
		rep := s.pluginRep
		if opts.PluginSandbox != nil {
			rep = opts.Sandbox.Report()
		}
		s.rec = core.NewRecorder(opts.Audit, opts.SessionID, &audit.PluginRef{
			Name: opts.Plugin.Name, Version: opts.Plugin.Version,
			Source: opts.Plugin.Source, ManifestDigest: opts.Plugin.ManifestDigest,
		}, rep, ui)
	}
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

	spec := s.opts.PluginSpec
	spec.Kind = sandbox.KindPlugin
	spec.Name = s.opts.Plugin.Name
	spec.Path = s.opts.Program
	spec.Args = append([]string{s.opts.Program}, s.opts.Args...)
	startDetails := map[string]any{audit.DetailCommand: s.opts.Command, "grants": s.opts.Grants}
	for k, v := range s.opts.PluginStartDetails {
		startDetails[k] = v
	}
	proc, err := core.Spawn(core.SpawnOptions{
		Sandbox: s.pluginSandbox(), Report: &s.pluginRep, Spec: spec, Cwd: s.opts.PluginCwd, Pipes: true,
		Stderr: s.opts.Stderr, Recorder: s.rec, StartDetails: startDetails,
		Ladder:       core.Ladder{CancelGrace: s.lim.CancelGrace, KillAfter: s.lim.KillAfter},
		DrainTimeout: s.lim.DrainTimeout,
		Warn: func(m string) {
			if s.opts.UI != nil {
				s.opts.UI.Warn(fmt.Sprintf("plugin %s: %s", s.opts.Plugin.Name, m))
			}
		},
	})
	if err != nil {
		// core.Spawn's errors carry their sentinel already (ErrLaunch, ErrSandbox are core's).
		return nil, err
	}
	s.proc = proc

	s.writer = protocol.NewWriter(proc.Stdin)
	if err := s.writer.Send(s.initMessage()); err != nil {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s did not accept init: %v", s.opts.Plugin.Name, err))
	}

	// Prompts are serialised on the one terminal.
	go s.promptLoop()

	sigDone := make(chan struct{})
	go proc.WatchSignals(s.opts.Signals, sigDone, s.sendInterrupt)

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		s.readLoop(proc.Stdout)
	}()

	<-proc.Done()
	// The plugin is gone: nothing it asked for may outlive it.
	s.cancel()
	close(sigDone)
	select {
	case <-readDone:
	case <-time.After(s.lim.DrainTimeout):
		proc.Stdout.Close()
		<-readDone
	}
	s.waitWorkers()
	if err := s.tmp.remove(); err != nil {
		s.opts.UI.Warn("removing the execs' temp dir: " + err.Error())
	}
	close(s.prompts)

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
	ex := proc.Finish(nil)
	out := &Outcome{ExitCode: ex.Code, Interrupted: ex.Interrupted, StoppedBy: ex.StoppedBy, Result: ex.Result, Malformed: int(s.malformed.Load())}
	if n := s.rec.Errors(); n > 0 {
		return out, fmt.Errorf("audit log: %d records could not be written", n)
	}
	return out, nil
}

// pluginSandbox starts the plugin itself: PluginSandbox (a WASM runtime) when set, else the
// OS sandbox. Execs and git always go through the OS sandbox.
func (s *session) pluginSandbox() sandbox.Sandbox {
	if s.opts.PluginSandbox != nil {
		return s.opts.PluginSandbox
	}
	return s.opts.Sandbox
}

// sendInterrupt tells the plugin the user interrupted the session (the ladder's first step)
// and cancels every request in flight.
func (s *session) sendInterrupt() {
	s.cancel()
	_ = s.writer.Send(protocol.NewCancel(nil, protocol.CancelUserInterrupt))
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
	rep := s.pluginRep
	in.Sandbox = &protocol.SandboxInfo{
		Confinement: rep.Confinement,
		LandlockABI: rep.LandlockABI,
		Cgroup:      rep.CgroupMode,
		Network:     s.opts.PluginSpec.Network,
		Filesystem:  s.opts.Grants.Filesystem,
	}
	return in
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
	s.rec.Record(event, d, rc, details, durable)
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
		s.sample = clip.Mark(err.Error(), maxValueText, "…[truncated]")
	}
	s.skippedMu.Unlock()
	if s.warned.Add(1) <= maxWarnings {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: %v", s.opts.Plugin.Name, err))
	}
}
