// SPDX-License-Identifier: MIT

// Package legacy is the adapter for plugins without a protocol: the whole program runs on
// the project, confined by default (legacy = "confined"), or unconfined as an explicit,
// announced and recorded policy choice.
package legacy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

// Options run a plugin without a protocol as a whole program (the legacy adapter).
type Options struct {
	Sandbox sandbox.Sandbox
	// Spec is the legacy profile (policy.Profile.Legacy) with Name, Path and Args set.
	Spec     sandbox.Spec
	Cwd      string
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Recorder *core.Recorder
	// Unconfined runs it without the sandbox: an explicit policy choice (legacy =
	// "unconfined") the caller announces; it is recorded as such before the start.
	Unconfined bool
	Signals    <-chan os.Signal
	Ladder     core.Ladder
	Ctx        context.Context // ends an unconfined run
}

// Run runs a legacy plugin to its end. A terminal is never handed to it: the sandbox
// copies a terminal's bytes through pipes, so it cannot inject input with TIOCSTI.
func Run(o Options) (*core.Exit, error) {
	if o.Unconfined {
		return runUnconfined(o)
	}
	spec := o.Spec
	spec.Kind = sandbox.KindLegacy
	// Its stdout reaches a terminal only through the sanitiser (its stderr: Spawn's pump).
	// The sandbox copies through a pipe whatever is not a plain file, so the bytes stream
	// as the plugin writes them; a file or pipe gets them unchanged.
	stdout, flush := ui.PluginStream(o.Stdout)
	spec.Stdin, spec.Stdout = o.Stdin, stdout
	// A legacy plugin has no protocol cancel: the ladder starts at SIGTERM.
	ladder := o.Ladder
	if ladder.CancelGrace <= 0 {
		ladder = core.Ladder{CancelGrace: 1, KillAfter: core.DefaultLadder.CancelGrace}
	}
	proc, err := core.Spawn(core.SpawnOptions{
		Sandbox: o.Sandbox, Spec: spec, Cwd: o.Cwd, Stderr: o.Stderr, Recorder: o.Recorder,
		StartDetails: map[string]any{audit.DetailCommand: spec.Name, "args": spec.Args[1:], "legacy": true},
		Ladder:       ladder,
	})
	if err != nil {
		return nil, err
	}
	go proc.WatchSignals(o.Signals, nil, nil)
	ex := proc.Finish(nil)
	flush()
	return ex, nil
}

func runUnconfined(o Options) (*core.Exit, error) {
	rec := o.Recorder
	if err := rec.RecordNow(audit.EventLegacyUnconfined, audit.Allow, reason.OK, map[string]any{
		"program": o.Spec.Path, "args": o.Spec.Args[1:],
	}); err != nil {
		// Audit before act: no record of the start, no start.
		return nil, fmt.Errorf("%w: %w: %w", core.ErrLaunch, core.ErrAudit, err)
	}
	// Unconfined means as the user would run it: their environment, their terminal (it is
	// in fledge's process group, so Ctrl+C reaches it directly).
	cmd := exec.CommandContext(o.Ctx, o.Spec.Path, o.Spec.Args[1:]...)
	cmd.Dir = o.Cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	cmd.Env = os.Environ()
	err := cmd.Start()
	if err == nil {
		done := make(chan struct{})
		go forwardEnds(cmd.Process, o.Signals, done)
		err = cmd.Wait()
		close(done)
	}
	var ee *exec.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if code < 0 {
			// Killed by a signal: the status a shell gives it.
			code = 128 + 9
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
	default:
		rec.Record(audit.EventPluginExit, audit.Error, reason.LaunchFailed, map[string]any{"error": err.Error()}, true)
		return nil, fmt.Errorf("%w: %w", core.ErrLaunch, err)
	}
	rec.Record(audit.EventPluginExit, audit.Allow, reason.OK, map[string]any{audit.DetailExitCode: code, "unconfined": true}, true)
	return &core.Exit{Code: code}, nil
}

// forwardEnds passes SIGTERM and SIGHUP sent to fledge on to an unconfined plugin, which
// runs as the user would run it: a terminal's Ctrl+C and hangup reach its process group (the
// plugin's too) by themselves, a signal sent to fledge alone would not. SIGINT is not passed
// on: the terminal's reaches the plugin already, and twice is not once. A closed output is
// the plugin's own SIGPIPE.
func forwardEnds(p *os.Process, sigs <-chan os.Signal, done <-chan struct{}) {
	if sigs == nil {
		return
	}
	for {
		select {
		case <-done:
			return
		case sig := <-sigs:
			if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
				_ = p.Signal(sig)
			}
		}
	}
}
