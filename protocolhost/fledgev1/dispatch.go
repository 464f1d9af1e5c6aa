// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/internal/capbuf"
	"github.com/fledgehq/fledge/pathguard"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
	"github.com/fledgehq/fledge/ui/clip"
)

func (s *session) readLoop(r io.Reader) {
	// Output and log lines of one read are written together (the user's stdout when piped).
	r, release := ui.HoldingReader(r, s.opts.UI)
	defer release()
	// A UI that copies what it keeps takes output and log messages straight from the
	// Reader's buffers: dispatch hands each on before the next is read.
	_, copies := s.opts.UI.(ui.TextCopier)
	rd := protocol.NewReader(r, protocol.ReaderOptions{MaxLine: s.lim.LineMax, Transient: copies})
	for {
		msg, err := rd.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			if errors.Is(err, protocol.ErrSkipped) {
				var le *protocol.LineError
				if errors.As(err, &le) && le.Kind == protocol.UnknownType && le.Type != "" && le.Type != protocol.TypeResponse {
					// Forward-compatible: unknown types are ignored, counted, not shouted.
					s.malformed.Add(1)
					s.skippedMu.Lock()
					s.skipped["unknown_type"]++
					s.skippedMu.Unlock()
					continue
				}
				if errors.As(err, &le) && le.Kind == protocol.UnknownType && le.Type == protocol.TypeResponse {
					// The id is the plugin's text: quoted (control characters escaped) and cut.
					s.warnSkipped(fmt.Errorf("line %d: skipped: orphaned response (id %s): it answers no pending request", le.Line, idForLog(le.ID)))
					continue
				}
				if errors.As(err, &le) && le.ID != nil && le.Kind != protocol.UnknownType {
					// A broken request that still carries a usable id gets its one reply, or
					// the plugin would wait for it forever.
					s.warnSkipped(err)
					s.answerInvalid(le)
					continue
				}
				if errors.As(err, &le) && le.Kind == protocol.TooLong {
					s.record(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
						audit.DetailLimit: "line_max", audit.DetailLimitValue: s.lim.LineMax, "line": le.Line,
					}, false)
				}
				s.warnSkipped(err)
				continue
			}
			if s.ctx.Err() == nil {
				s.opts.UI.Warn(fmt.Sprintf("plugin %s: reading its output: %v", s.opts.Plugin.Name, err))
			}
			return
		}
		s.dispatch(msg)
	}
}

func (s *session) dispatch(m *protocol.Message) {
	name := s.opts.Plugin.Name
	if m.Output == nil && m.Log == nil {
		// Only runs of output and log lines are held: whatever else the plugin asks comes
		// after what it printed, as it sent them.
		if h, ok := s.opts.UI.(ui.Holder); ok {
			h.Release()
		}
	}
	switch {
	case m.Output != nil:
		s.opts.UI.Output(m.Output.Text)
	case m.Log != nil:
		s.opts.UI.Log(name, m.Log.Level, m.Log.Message)
	case m.Progress != nil:
		p := m.Progress
		s.opts.UI.Progress(name, p.Message, p.Current, p.Total, p.Done)
	case m.Store != nil:
		s.handleStore(m.Store)
	case m.Load != nil:
		s.withSlot(m.Load.ID, "load", func() { s.handleLoad(m.Load) })
	case m.Metadata != nil:
		s.withSlot(m.Metadata.ID, "metadata", func() { s.handleMetadata(m.Metadata) })
	case m.Exec != nil:
		s.startExec(m.Exec)
	case m.Prompt != nil:
		req := m.Prompt
		s.queuePrompt(req.ID, "prompt", func(ctx context.Context) (any, error) {
			return s.opts.UI.Prompt(ctx, ui.PromptRequest{Plugin: name, Message: req.Message, Default: req.Default, Validate: req.Validate})
		})
	case m.Confirm != nil:
		req := m.Confirm
		s.queuePrompt(req.ID, "confirm", func(ctx context.Context) (any, error) {
			return s.opts.UI.Confirm(ctx, name, req.Message, req.Default)
		})
	case m.Select != nil:
		req := m.Select
		s.queuePrompt(req.ID, "select", func(ctx context.Context) (any, error) {
			i, err := s.opts.UI.Select(ctx, name, req.Message, req.Options, req.Default)
			if err != nil {
				return nil, err
			}
			return req.Options[i], nil
		})
	case m.MultiSelect != nil:
		req := m.MultiSelect
		s.queuePrompt(req.ID, "multi_select", func(ctx context.Context) (any, error) {
			idx, err := s.opts.UI.MultiSelect(ctx, name, req.Message, req.Options, req.Defaults)
			if err != nil {
				return nil, err
			}
			out := make([]string, 0, len(idx))
			for _, i := range idx {
				out = append(out, req.Options[i])
			}
			return out, nil
		})
	default:
		// A response or cancel from the plugin answers nothing we asked.
		s.warnSkipped(fmt.Errorf("line %d: skipped: %q message answers no pending request", m.Line, m.Type))
	}
}

func (s *session) respond(id protocol.ID, value any) {
	defer s.pending.Add(-1)
	err := s.writer.Send(protocol.NewResponse(id, value))
	if errors.Is(err, protocol.ErrLineTooLong) {
		// Every request gets its one reply: one too big to send becomes a cancel, or the
		// plugin would wait for it forever.
		s.record(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
			audit.DetailLimit: "reply_line", audit.DetailMessage: err.Error(),
		}, false)
		err = s.writer.Send(protocol.NewCancel(id, protocol.CancelLimit))
	}
	if err != nil && s.ctx.Err() == nil {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: sending response: %v", s.opts.Plugin.Name, err))
	}
}

// respondExec streams an exec reply straight from the captured output: building it as a Go
// value would hold the output several times over (strings, the encoded line) — about 7x
// the cap for binary output. out carries everything but the two streams; its Stderr is a
// note fledge appends (timeout, OOM). The encoding is the one Send would produce.
func (s *session) respondExec(id protocol.ID, out protocol.ExecResult, stdout, stderr []byte) {
	defer s.pending.Add(-1)
	err := s.writer.SendStream(func(e *protocol.StreamEncoder) {
		e.Raw(`{"type":"response","id":`)
		e.RawBytes(id)
		e.Raw(`,"value":{"code":`)
		e.Int(out.Code)
		e.Raw(`,"stdout":`)
		e.String(stdout)
		e.Raw(`,"stderr":`)
		e.String(stderr, []byte(out.Stderr))
		if out.StdoutTruncated {
			e.Raw(`,"stdout_truncated":true`)
		}
		if out.StderrTruncated {
			e.Raw(`,"stderr_truncated":true`)
		}
		if out.TimedOut {
			e.Raw(`,"timed_out":true`)
		}
		if out.Reason != "" {
			e.Raw(`,"reason":`)
			e.String([]byte(out.Reason))
		}
		e.Raw(`}}`)
	})
	if err != nil && s.ctx.Err() == nil {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: sending exec response: %v", s.opts.Plugin.Name, err))
	}
}

func (s *session) cancelReq(id protocol.ID, why string) {
	defer s.pending.Add(-1)
	_ = s.writer.Send(protocol.NewCancel(id, why))
}

// admit counts an id-bearing request; false means the pending bound is hit and the caller
// must refuse it (the refusal is still its one reply).
func (s *session) admit(kind string) bool {
	if n := s.pending.Add(1); n > int64(s.lim.PendingRequests) {
		s.record(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
			audit.DetailLimit: "pending_requests", audit.DetailLimitValue: s.lim.PendingRequests, "request": kind,
		}, false)
		return false
	}
	return true
}

// withSlot runs a quick request in its own goroutine, bounded by the pending limit.
func (s *session) withSlot(id protocol.ID, kind string, fn func()) {
	if !s.admit(kind) {
		s.cancelReq(id, protocol.CancelLimit)
		return
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		fn()
	}()
}

// ---- prompts ----

func (s *session) queuePrompt(id protocol.ID, kind string, ask func(ctx context.Context) (any, error)) {
	if !s.admit(kind) {
		s.cancelReq(id, protocol.CancelLimit)
		return
	}
	s.workers.Add(1)
	job := func() {
		defer s.workers.Done()
		if s.ctx.Err() != nil {
			s.cancelReq(id, protocol.CancelUserInterrupt)
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.lim.PromptTimeout)
		defer cancel()
		v, err := ask(ctx)
		switch {
		case err == nil:
			s.record(audit.EventPrompt, audit.Allow, reason.OK, promptDetails(kind, true, nil), false)
			s.respond(id, v)
		case errors.Is(err, ui.ErrInterrupted) && s.opts.Interrupt != nil:
			// A session interrupt, as SIGINT outside a question: the signal path cancels the
			// session (so no later question is asked) and escalates. Never block on it: a
			// full channel already holds an interrupt.
			select {
			case s.opts.Interrupt <- os.Interrupt:
			default:
			}
			// Reply only once the session is cancelled: the interrupt is then on record before
			// the plugin can act on this cancel (exit, or ask its next question).
			select {
			case <-s.ctx.Done():
			case <-time.After(s.lim.CancelGrace):
			}
			s.record(audit.EventPrompt, audit.Deny, reason.Cancelled, promptDetails(kind, false, map[string]any{"interrupted": true}), false)
			s.cancelReq(id, protocol.CancelUserInterrupt)
		case errors.Is(err, ui.ErrAborted):
			s.record(audit.EventPrompt, audit.Deny, reason.Cancelled, promptDetails(kind, false, map[string]any{"aborted": true}), false)
			s.cancelReq(id, protocol.CancelUserInterrupt)
		case errors.Is(err, ui.ErrNonInteractive):
			s.record(audit.EventPrompt, audit.Deny, reason.NonInteractive, promptDetails(kind, false, nil), false)
			s.cancelReq(id, protocol.CancelNonInteractive)
		case errors.Is(err, context.DeadlineExceeded) && s.ctx.Err() == nil:
			s.record(audit.EventPrompt, audit.Deny, reason.Timeout, promptDetails(kind, false, map[string]any{"after": s.lim.PromptTimeout.String()}), false)
			// A timeout cancel ends the session (spec invariant 10): the ladder escalates to
			// SIGTERM and SIGKILL if the plugin does not exit by itself.
			s.cancelReq(id, protocol.CancelTimeout)
			s.cancel()
			s.proc.Stop(string(reason.Timeout), false, nil)
		case s.ctx.Err() != nil:
			s.record(audit.EventPrompt, audit.Deny, reason.Cancelled, promptDetails(kind, false, nil), false)
			s.cancelReq(id, protocol.CancelUserInterrupt)
		default:
			s.record(audit.EventPrompt, audit.Error, reason.MalformedMessage, promptDetails(kind, false, map[string]any{"error": err.Error()}), false)
			s.opts.UI.Warn(fmt.Sprintf("plugin %s: %s refused: %v", s.opts.Plugin.Name, kind, err))
			s.cancelReq(id, string(reason.MalformedMessage))
		}
	}
	select {
	case s.prompts <- job:
	default:
		// Cannot happen while admit bounds pending to the channel size; refuse rather than block.
		s.workers.Done()
		s.cancelReq(id, protocol.CancelLimit)
	}
}

// promptDetails are a prompt record's details: which kind of question, and whether it was
// answered (false: cancelled, for the reason in the record).
func promptDetails(kind string, answered bool, extra map[string]any) map[string]any {
	d := map[string]any{audit.DetailPromptKind: kind, audit.DetailAnswered: answered}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

func (s *session) promptLoop() {
	for job := range s.prompts {
		job()
	}
}

// answerInvalid replies to a request that was skipped as invalid but carried an id.
func (s *session) answerInvalid(le *protocol.LineError) {
	if !s.admit(le.Type) {
		s.cancelReq(le.ID, protocol.CancelLimit)
		return
	}
	// Counted with the other skipped lines in the session's one malformed_lines record.
	if le.Type == protocol.TypeExec {
		s.execRefuse(le.ID, 126, reason.MalformedMessage, "exec refused: invalid request: "+clip.Mark(le.Detail, maxValueText, "…[truncated]"))
		return
	}
	s.cancelReq(le.ID, string(reason.MalformedMessage))
}

// ---- storage ----

// refusedCap is the reason a request for a capability the plugin does not hold is refused
// with: never declared in its manifest, or declared and not granted by the user.
func (s *session) refusedCap(declared bool) reason.Code {
	if declared {
		return reason.CapabilityNotGranted
	}
	return reason.CapabilityNotDeclared
}

func (s *session) handleStore(m *protocol.Store) {
	if !s.opts.Grants.Store {
		s.record(audit.EventStore, audit.Deny, s.refusedCap(s.opts.Declared.Store), map[string]any{audit.DetailKey: m.Key, audit.DetailCapability: "store"}, false)
		return // the spec: dropped silently
	}
	if s.opts.Store == nil {
		s.record(audit.EventStore, audit.Error, reason.LaunchFailed, map[string]any{audit.DetailKey: m.Key, "error": "storage unavailable"}, false)
		return
	}
	if err := s.opts.Store.Set(m.Key, m.Value); err != nil {
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: store %q refused: %v", s.opts.Plugin.Name, clip.Mark(m.Key, maxValueText, "…[truncated]"), err))
		d := map[string]any{audit.DetailKey: m.Key, audit.DetailBytes: len(m.Value), "error": err.Error()}
		rc, decision := reason.LimitExceeded, audit.Deny
		var le *plugin.LimitError
		switch {
		case errors.As(err, &le):
			d[audit.DetailLimit], d[audit.DetailLimitValue] = "store_"+le.What, le.Limit
		case !errors.Is(err, plugin.ErrLimit):
			rc, decision = reason.LaunchFailed, audit.Error // an I/O failure, not a bound
		}
		s.record(audit.EventStore, decision, rc, d, false)
		return
	}
	s.record(audit.EventStore, audit.Allow, reason.OK, map[string]any{audit.DetailKey: m.Key, audit.DetailBytes: len(m.Value)}, false)
}

func (s *session) handleLoad(m *protocol.Load) {
	if !s.opts.Grants.Store || s.opts.Store == nil {
		rc := s.refusedCap(s.opts.Declared.Store)
		if s.opts.Grants.Store {
			rc = reason.LaunchFailed
		}
		s.record(audit.EventLoad, audit.Deny, rc, map[string]any{audit.DetailKey: m.Key, audit.DetailCapability: "store"}, false)
		s.respond(m.ID, nil)
		return
	}
	v, ok := s.opts.Store.Get(m.Key)
	s.record(audit.EventLoad, audit.Allow, reason.OK, map[string]any{audit.DetailKey: m.Key, "found": ok, audit.DetailBytes: len(v)}, false)
	if !ok {
		s.respond(m.ID, nil)
		return
	}
	s.respond(m.ID, v)
}

// ---- metadata ----

func (s *session) handleMetadata(m *protocol.Metadata) {
	if !s.opts.Grants.Metadata {
		s.record(audit.EventMetadata, audit.Deny, s.refusedCap(s.opts.Declared.Metadata), map[string]any{"keys": m.Keys, audit.DetailCapability: "metadata"}, false)
		s.respond(m.ID, map[string]any{})
		return
	}
	select {
	case s.metaSlots <- struct{}{}:
		defer func() { <-s.metaSlots }()
	case <-s.ctx.Done():
		s.cancelReq(m.ID, protocol.CancelUserInterrupt)
		return
	}
	out := make(map[string]any, len(m.Keys))
	for _, k := range m.Keys {
		if len(out) >= 64 {
			break // a bounded answer; more keys than exist is not a real request
		}
		if k == "env" {
			env := s.opts.MetadataEnv
			if env == nil {
				env = map[string]string{}
			}
			out[k] = env
			continue
		}
		v, _ := project.MetadataWith(s.ctx, s.git(), s.opts.Project, k)
		out[k] = v // unknown keys -> null
	}
	s.record(audit.EventMetadata, audit.Allow, reason.OK, map[string]any{"keys": m.Keys}, false)
	s.respond(m.ID, out)
}

// ---- exec ----

func (s *session) execRefuse(id protocol.ID, code int, rc reason.Code, msg string) {
	s.respond(id, protocol.ExecResult{Code: code, Stderr: "fledge: " + msg + "\n", Reason: string(rc)})
}

func (s *session) startExec(m *protocol.Exec) {
	base := map[string]any{
		audit.DetailCommand: m.Command, audit.DetailArgv: []string{"sh", "-c", m.Command},
		audit.DetailCwdRequested: m.Cwd, // the audit log bounds the record
	}
	if !s.admit("exec") {
		s.execRefuse(m.ID, 126, reason.LimitExceeded, fmt.Sprintf("exec refused: more than %d requests pending", s.lim.PendingRequests))
		return
	}
	if !s.opts.Grants.Exec {
		base[audit.DetailCapability] = "exec"
		rc := s.refusedCap(s.opts.Declared.Exec)
		s.record(audit.EventExecDecision, audit.Deny, rc, base, true)
		why := "was not granted the exec capability"
		if rc == reason.CapabilityNotDeclared {
			why = "was not granted the exec capability (its plugin.toml does not declare it)"
		}
		s.execRefuse(m.ID, 126, rc, fmt.Sprintf("exec denied: plugin %q %s", s.opts.Plugin.Name, why))
		return
	}
	// One timeout rule for every protocol (policy.ExecTimeout): above timeout_max the
	// request is clamped and still runs, as with the Rust fledge host; the reply and the
	// decision record say so.
	timeout, clamped, err := policy.ExecTimeout(m.Timeout, s.lim.ExecTimeoutDefault, s.lim.ExecTimeoutMax)
	if err != nil {
		s.record(audit.EventExecDecision, audit.Deny, reason.MalformedMessage, base, true)
		s.execRefuse(m.ID, 126, reason.MalformedMessage, "exec refused: "+err.Error())
		return
	}
	if clamped {
		base["timeout_requested_s"] = *m.Timeout
		base["timeout_clamped"] = true
		base[audit.DetailLimit], base[audit.DetailLimitValue] = "exec_timeout_max", s.lim.ExecTimeoutMax.Seconds()
	}
	if waiting := s.execWaiting.Add(1); waiting > int64(s.lim.ConcurrentExecs+s.lim.ExecQueue) {
		s.execWaiting.Add(-1)
		s.record(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
			audit.DetailLimit: "exec_queue", audit.DetailLimitValue: s.lim.ExecQueue, audit.DetailCommand: m.Command,
		}, false)
		s.execRefuse(m.ID, 126, reason.LimitExceeded, fmt.Sprintf("exec refused: %d execs running and %d queued (the limit)", s.lim.ConcurrentExecs, s.lim.ExecQueue))
		return
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		defer s.execWaiting.Add(-1)
		select {
		case s.execSlots <- struct{}{}:
		case <-s.ctx.Done():
			s.cancelReq(m.ID, protocol.CancelUserInterrupt)
			return
		}
		defer func() { <-s.execSlots }()
		s.runExec(m, timeout, base)
	}()
}

func (s *session) runExec(m *protocol.Exec, timeout time.Duration, details map[string]any) {
	dir := s.execDir(m, details)
	if dir == nil {
		return
	}
	defer dir.Close()
	details["timeout_s"] = timeout.Seconds()
	stdout := capbuf.New(s.lim.OutputCap)
	stderr := capbuf.New(s.lim.OutputCap)
	spec := s.execSpec(m, dir, timeout, stdout, stderr)
	details["sandbox_mode"] = s.execMode
	proc := s.launchExec(m, &spec, details)
	if proc == nil {
		return
	}
	res, err := proc.Wait()
	if err != nil || res == nil {
		s.record(audit.EventExecOutcome, audit.Error, reason.Crashed, map[string]any{audit.DetailCommand: m.Command, "error": fmt.Sprint(err)}, false)
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: exec failed: %v", s.opts.Plugin.Name, err))
		s.execRefuse(m.ID, 126, reason.Crashed, "exec failed: the sandbox lost the command")
		return
	}
	s.finishExec(m, timeout, details, res, stdout, stderr)
}

// execDir resolves an exec's cwd through the path guard to a verified directory handle, or
// refuses the exec (cwd_refused record, 126 reply) and returns nil.
func (s *session) execDir(m *protocol.Exec, details map[string]any) *pathguard.Dir {
	refuse := func(why, msg string) *pathguard.Dir {
		details[audit.DetailMessage] = why
		s.record(audit.EventCwdRefused, audit.Deny, reason.PathEscape, details, true)
		s.execRefuse(m.ID, 126, reason.PathEscape, msg)
		return nil
	}
	if s.guard == nil {
		return refuse("no directory is allowed as a working directory", "exec refused: no directory is allowed as a working directory")
	}
	dir, err := s.guard.Resolve(m.Cwd)
	if err != nil {
		var pe *pathguard.Error
		if errors.As(err, &pe) {
			details["refusal"] = string(pe.Reason)
		}
		return refuse(err.Error(), "exec refused: cwd "+quoteClip(m.Cwd)+": "+err.Error())
	}
	details[audit.DetailCwdResolved] = dir.Path
	// The handle must still be the directory that was checked when it is handed over (a
	// rename race between Resolve and now is refused, not followed).
	if err := dir.Verify(); err != nil {
		dir.Close()
		return refuse(err.Error(), "exec refused: cwd "+quoteClip(m.Cwd)+" changed while it was being checked")
	}
	return dir
}

// execSpec is the sandbox spec of one exec: the session's exec profile, the command under
// sh -c, the guarded directory, bounded output buffers and the session's TMPDIR.
func (s *session) execSpec(m *protocol.Exec, dir *pathguard.Dir, timeout time.Duration, stdout, stderr *capbuf.Buffer) sandbox.Spec {
	spec := s.opts.ExecSpec
	spec.Kind = sandbox.KindExec
	spec.Name = s.opts.Plugin.Name
	spec.Path = "/bin/sh"
	spec.Args = []string{"sh", "-c", m.Command}
	spec.Dir = dir.File
	spec.DirPath = dir.Path
	spec.Stdin = nil
	spec.Stdout = stdout
	spec.Stderr = stderr
	spec.Limits.Timeout = timeout
	s.withSessionTmp(&spec)
	// The mode this command is about to get; the outcome record has the one it got.
	s.execModeOnce.Do(func() {
		rep := s.opts.Sandbox.Report()
		s.execMode = map[string]any{"confinement": rep.Confinement, "landlock_abi": rep.LandlockABI, "cgroup": rep.CgroupMode, "tree_kill": rep.TreeKill}
	})
	return spec
}

// launchExec records the decision and starts the command, which runs only once the record
// is durable: the record is written while the sandbox is prepared (on another core where
// one is free) and the launch waits for it right before the fork (BeforeExec). No record, no
// command. It returns nil after refusing the exec.
func (s *session) launchExec(m *protocol.Exec, spec *sandbox.Spec, details map[string]any) sandbox.Process {
	decided := s.rec.BeforeActAsync(audit.EventExecDecision, details)
	spec.BeforeExec = decided.Durable
	s.rec.ObserveKernel(spec, m.Command)
	proc, err := s.opts.Sandbox.Start(s.ctx, spec)
	// Start returns after BeforeExec ran, or failed before it: either way the record is
	// done or on its way, and Durable completes its sync.
	if aerr := decided.Durable(); aerr != nil {
		if err == nil && proc != nil {
			// Cannot happen (BeforeExec refused the fork); if it did, the command has no
			// record and must not run.
			_ = proc.Kill()
			_, _ = proc.Wait()
		}
		s.refuseUnrecorded(m, aerr)
		return nil
	}
	if err != nil {
		rc := reason.LaunchFailed
		if errors.Is(err, sandbox.ErrUnavailable) {
			rc = reason.SandboxUnavailable
		}
		s.record(audit.EventExecOutcome, audit.Error, rc, map[string]any{audit.DetailCommand: m.Command, "error": err.Error()}, false)
		// The internal error (paths, errno, cgroup detail) is for the user and the log, not
		// the plugin: it gets what happened in words of the protocol.
		s.opts.UI.Warn(fmt.Sprintf("plugin %s: exec could not start: %v", s.opts.Plugin.Name, err))
		msg := "exec could not start in the sandbox"
		if rc == reason.SandboxUnavailable {
			msg = "exec refused: the sandbox cannot be enforced on this machine and the policy is strict"
		}
		s.execRefuse(m.ID, 126, rc, msg)
		return nil
	}
	return proc
}

// refuseUnrecorded refuses an exec whose decision record could not be written.
func (s *session) refuseUnrecorded(m *protocol.Exec, err error) {
	if errors.Is(err, core.ErrSessionBudget) {
		// The session wrote its share of the log: refused, counted, and said once in the
		// log (session_log_budget) and once to the user, who can raise the budget; not
		// warned about per exec.
		s.budgetWarn.Do(func() {
			s.opts.UI.Warn(fmt.Sprintf("plugin %s: execs are refused from now on: %v", s.opts.Plugin.Name, err))
		})
		s.execRefuse(m.ID, 126, reason.LimitExceeded, "exec refused: the audit log cannot record it (this session's log budget is spent)")
		return
	}
	s.opts.UI.Warn(fmt.Sprintf("audit log write failed, exec refused: %v", err))
	// The plugin is told what happened, not the host's internal error text.
	s.execRefuse(m.ID, 126, reason.LaunchFailed, "exec refused: the audit log cannot record it")
}

// finishExec answers the plugin with the command's result and records the outcome.
func (s *session) finishExec(m *protocol.Exec, timeout time.Duration, details map[string]any, res *sandbox.Result, stdout, stderr *capbuf.Buffer) {
	// The cap holds on the wire too: escaping must not grow the reply past it (wireCut).
	budget := min(s.lim.OutputCap, maxStreamWire)
	outBytes, errBytes := stdout.Bytes(), stderr.Bytes()
	outN, outCut := wireCut(outBytes, budget)
	errN, errCut := wireCut(errBytes, budget)
	out := protocol.ExecResult{
		Code:            res.ExitCode,
		StdoutTruncated: stdout.Truncated() || outCut,
		StderrTruncated: stderr.Truncated() || errCut,
	}
	rc := execReason(res, &out, timeout)
	decision := audit.Allow
	if rc != reason.OK {
		out.Reason = string(rc)
		decision = audit.Error
	}
	if details["timeout_clamped"] == true {
		out.Stderr += fmt.Sprintf("\nfledge: the requested timeout of %vs was clamped to the maximum of %s\n", details["timeout_requested_s"], timeout)
	}
	if len(res.Quarantined) > 0 {
		for _, w := range s.rec.Quarantined(res.Quarantined) {
			s.opts.UI.Warn(fmt.Sprintf("plugin %s: %s", s.opts.Plugin.Name, w))
		}
	}
	// The reply goes first: the plugin's round trip does not wait for the outcome record,
	// which still lands before the session's plugin_exit record (workers are waited for).
	if res.Cancelled {
		s.cancelReq(m.ID, protocol.CancelUserInterrupt)
	} else {
		s.respondExec(m.ID, out, outBytes[:outN], errBytes[:errN])
	}
	s.record(audit.EventExecOutcome, decision, rc, map[string]any{
		audit.DetailCommand:        m.Command,
		audit.DetailExitCode:       res.ExitCode,
		audit.DetailSignal:         res.Signal,
		audit.DetailDurationMS:     res.Duration.Milliseconds(),
		audit.DetailTimedOut:       res.TimedOut,
		audit.DetailOOMKilled:      res.OOMKilled,
		audit.DetailProcsKilled:    res.Killed,
		audit.DetailPeakMemory:     res.PeakMemory,
		audit.DetailStdoutBytes:    stdout.Total(),
		audit.DetailStderrBytes:    stderr.Total(),
		audit.DetailOutputTruncate: out.StdoutTruncated || out.StderrTruncated,
		"stdout_truncated":         out.StdoutTruncated,
		"stderr_truncated":         out.StderrTruncated,
		"cancelled":                res.Cancelled,
		"sandbox_mode":             res.Mode,
		"git_quarantined":          len(res.Quarantined),
	}, false)
}

// execReason is the reason code of a command's end, with what the plugin is told about it
// added to out.
func execReason(res *sandbox.Result, out *protocol.ExecResult, timeout time.Duration) reason.Code {
	switch {
	case res.TimedOut:
		out.Code = 124
		out.TimedOut = true
		out.Stderr += fmt.Sprintf("\nfledge: command timed out after %s and was killed\n", timeout)
		return reason.Timeout
	case res.Cancelled:
		return reason.Cancelled
	case res.OOMKilled:
		out.Stderr += "\nfledge: command was killed: out of memory (limit reached)\n"
		return reason.OOMKilled
	case res.Signal != "":
		// Killed by a signal (the kernel's SIGSYS for a denied syscall, a crash): it did
		// not end on its own, so it is not "allow ok". A non-zero exit status is the
		// command's own answer and stays allow, with exit_code.
		return reason.Crashed
	}
	return reason.OK
}

// idForLog renders a plugin's request id for a warning: a string id quoted with control
// characters escaped, a number as it is, both cut to 64 characters.
func idForLog(id protocol.ID) string {
	var str string
	if json.Unmarshal(id, &str) == nil {
		return fmt.Sprintf("%.64q", str)
	}
	return fmt.Sprintf("%.64s", string(id))
}

// maxValueText bounds a plugin-given value quoted in a message or record.
const maxValueText = 4096

func quoteClip(v string) string {
	return fmt.Sprintf("%q", strings.ToValidUTF8(clip.Mark(v, maxValueText, "…[truncated]"), "\uFFFD"))
}
