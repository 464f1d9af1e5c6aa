package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

// runLegacy runs a plugin without a protocol as a whole program on the project, with the
// user's stdio. Confined by default; "unconfined" is an explicit policy choice that is
// announced every run and recorded.
func runLegacy(ctx context.Context, g *Globals, e *env, u ui.UI, log *audit.Log, session string,
	ref *audit.PluginRef, program string, args []string, proj *project.Info, paths policy.Paths) error {
	rep := e.sb.Report()
	var recErr error
	rec := func(event string, d audit.Decision, rc reason.Code, details map[string]any, durable bool) {
		err := log.Append(&audit.Record{
			Session: session, Plugin: ref, Event: event, Decision: d, Reason: string(rc), Details: details,
			Sandbox: &audit.SandboxInfo{Mode: rep.Confinement, LandlockABI: rep.LandlockABI, CgroupMode: rep.CgroupMode},
		}, durable)
		if err != nil && recErr == nil {
			recErr = err
		}
	}
	cwdPath := paths.PluginDataDir
	if proj != nil {
		cwdPath = proj.Root
	}
	if wd, err := os.Getwd(); err == nil && proj != nil && policy.Within(wd, proj.Root) {
		cwdPath = wd
	}
	if e.cfg.Sandbox.Legacy == policy.LegacyUnconfined {
		u.Warn(fmt.Sprintf("running legacy plugin %s UNCONFINED (policy legacy = \"unconfined\" in %s)", ref.Name, e.cfg.File))
		rec(audit.EventLegacyUnconfined, audit.Allow, reason.OK, map[string]any{"program": program, "args": args}, true)
		if recErr != nil {
			return exitErr(ExitCannotRun, "legacy plugin %s not started: the audit log cannot record it: %v", ref.Name, recErr)
		}
		return runUnconfined(ctx, g, program, args, cwdPath, rec)
	}
	dir, err := os.Open(cwdPath)
	if err != nil {
		return exitErr(ExitCannotRun, "legacy plugin %s: working directory: %v", ref.Name, err)
	}
	defer dir.Close()
	spec := &sandbox.Spec{
		Kind: sandbox.KindLegacy, Name: ref.Name, Path: program,
		Args: append([]string{program}, args...), Dir: dir, DirPath: cwdPath,
		Env:    policy.ChildEnv(os.Environ(), e.cfg.Sandbox.EnvAllow, pluginEnvVars(ref.Name, "", paths.PluginDir, paths.PluginDataDir, g.nonInteractive())),
		Stdin:  g.Streams.In,
		Stdout: g.Streams.Out,
		Stderr: g.Streams.Err,
		Access: policy.LegacyAccess(paths, e.cfg), Network: e.cfg.NetworkAllowed(), UnixSockets: e.cfg.UnixSocketsAllowed(),
		Limits: e.cfg.PluginLimits(), PrivateTmp: true, Strict: e.cfg.Sandbox.Strict,
	}
	rec(audit.EventPluginStart, audit.Allow, reason.OK, map[string]any{
		audit.DetailCommand: ref.Name, "program": program, "args": args, audit.DetailArgv: spec.Args,
		audit.DetailCwdResolved: cwdPath, "legacy": true,
	}, true)
	if recErr != nil {
		// Audit before act: no record of the start, no start.
		return exitErr(ExitCannotRun, "legacy plugin %s not started: the audit log cannot record it: %v", ref.Name, recErr)
	}
	proc, err := e.sb.Start(context.Background(), spec)
	if err != nil {
		rc := reason.LaunchFailed
		if errors.Is(err, sandbox.ErrUnavailable) {
			rc = reason.SandboxUnavailable
		}
		rec(audit.EventPluginExit, audit.Error, rc, map[string]any{"error": err.Error()}, true)
		return exitErr(ExitCannotRun, "legacy plugin %s: %v", ref.Name, err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	interrupted := false
	go func() {
		select {
		case <-sigs:
			interrupted = true
			_ = proc.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = proc.Kill()
			}
		case <-done:
		}
	}()
	res, err := proc.Wait()
	close(done)
	if err != nil {
		rec(audit.EventPluginExit, audit.Error, reason.Crashed, map[string]any{"error": err.Error()}, true)
		return exitErr(ExitCannotRun, "legacy plugin %s: %v", ref.Name, err)
	}
	rc := reason.OK
	if res.OOMKilled {
		rc = reason.OOMKilled
	} else if res.Signal != "" {
		rc = reason.Crashed
	}
	rec(audit.EventPluginExit, audit.Allow, rc, map[string]any{
		audit.DetailExitCode: res.ExitCode, audit.DetailSignal: res.Signal, audit.DetailDurationMS: res.Duration.Milliseconds(),
		audit.DetailProcsKilled: res.Killed, audit.DetailOOMKilled: res.OOMKilled, audit.DetailPeakMemory: res.PeakMemory,
	}, true)
	if interrupted {
		return &ExitError{Code: ExitInterrupted}
	}
	return pluginExit(ref.Name, res.ExitCode, res)
}
