package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/protocolhost/fledgev1/protocol"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/ui"
)

// env is the machine's side of a command (core.Env) with the names the commands use.
type env struct {
	*core.Env
	configDir string
	stateDir  string
	auditPath string
	cfg       *policy.Config
	sb        sandbox.Sandbox
}

// openEnv loads policy, the sandbox and the audit log. Commands that only read (list, info)
// do not need it.
func openEnv(g *Globals) (*env, error) {
	cd, err := g.configDir()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	cfg, err := policy.Load(cd)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	ap, err := audit.DefaultPath()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	sb, err := platform.New(platform.Options{})
	if err != nil {
		return nil, exitErr(ExitCannotRun, "sandbox: %v", err)
	}
	ce := &core.Env{ConfigDir: cd, StateDir: stateDir(), AuditPath: ap, Config: cfg, Sandbox: sb}
	return &env{Env: ce, configDir: cd, stateDir: ce.StateDir, auditPath: ap, cfg: cfg, sb: sb}, nil
}

func (e *env) openAudit() (*audit.Log, error) {
	l, err := e.Audit()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	return l, nil
}

func (e *env) close() {
	if err := e.Close(); err != nil {
		_ = ui.HostLine(os.Stderr, fmt.Sprintf("fledge: warning: %v", err))
	}
}

func (e *env) paths(entryDir, dataDir string, proj *project.Info) policy.Paths {
	return e.Paths(entryDir, dataDir, proj)
}

func resolved(p string) string { return core.Resolved(p) }

func runPlugin(ctx context.Context, g *Globals, command string, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e, err := openEnv(g)
	if err != nil {
		return err
	}
	defer e.close()

	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	entry, err := reg.FindCommand(command)
	if err != nil {
		if errors.Is(err, plugin.ErrUnknownCommand) {
			return exitErr(ExitUnknownCmd, "unknown command %q: no installed plugin provides it (see 'fledge plugins list')", command)
		}
		return exitErr(ExitCannotRun, "%v", err)
	}
	cwd, _ := os.Getwd()
	proj, err := project.Detect(cwd, g.Project)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	log, err := e.openAudit()
	if err != nil {
		return err
	}
	b, err := e.Bind(entry, proj)
	if err != nil {
		return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	cmdSpec := b.Manifest.Command(command)
	if cmdSpec == nil {
		e.Refuse(b.Ref, audit.RefusalOther, command, "the plugin no longer declares this command")
		return exitErr(ExitUnknownCmd, "plugin %s no longer declares command %q; reinstall it", entry.Name, command)
	}
	program, err := e.Program(b, cmdSpec.Binary)
	if err != nil {
		return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	switch b.Manifest.Plugin.Protocol {
	case "", protocol.Version:
	case plugin.ProtocolJSONRPC:
		return exitErr(ExitUsage, "plugin %s speaks jsonrpc-2.0: run its tools with 'fledge tools call' (see 'fledge tools list') and its hooks with 'fledge hooks run'", entry.Name)
	case plugin.ProtocolMCP:
		e.Refuse(b.Ref, audit.RefusalOther, command, "an MCP server is not run as a command")
		return exitErr(ExitCannotRun, "plugin %s is an MCP server: its tools run with 'fledge tools call' or through 'fledge serve --mcp', not as a command", entry.Name)
	default:
		e.Refuse(b.Ref, audit.RefusalOther, command, "protocol "+b.Manifest.Plugin.Protocol+" is not run as a command")
		return exitErr(ExitCannotRun, "plugin %s speaks protocol %q, but this fledge only speaks %q: upgrade fledge", entry.Name, b.Manifest.Plugin.Protocol, protocol.Version)
	}

	u := ui.New(ui.Options{In: g.Streams.In, Out: g.Streams.Out, Err: g.Streams.Err, NonInteractive: g.nonInteractive()})
	defer u.Close()
	rec := e.NewRecorder(log, b.Ref, u.Warn)
	environ := os.Environ()
	prof := e.Profile(b, environ,
		pluginEnvVars(entry.Name, command, b.Paths.PluginDir, b.DataDir, g.nonInteractive()),
		pluginEnvVars(entry.Name, "", b.Paths.PluginDir, b.DataDir, g.nonInteractive()))
	rep := e.sb.Report()
	warnDegraded(u, e, rep)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if b.Manifest.Plugin.Protocol == "" {
		return runLegacy(ctx, g, e, u, rec, b, prof, program, args, sigs)
	}

	var storeIface fledgev1.StateStore
	if entry.Granted.Store {
		store, err := plugin.OpenStore(plugin.StatePath(e.configDir, entry.Name), plugin.DefaultStoreLimits)
		if err != nil {
			u.Warn(fmt.Sprintf("plugin storage unavailable: %v", err))
		} else {
			for _, w := range store.Warnings() {
				u.Warn(w)
			}
			storeIface = store
		}
	}

	// The plugin starts where the user is when it may read it (as the Rust fledge host does).
	pluginCwd := policy.PluginCwd(resolved(cwd), b.Paths.ProjectRoot, b.DataDir, prof.Plugin.Access)

	stderr, flushStderr := pluginStderr(g.Streams.Err)
	defer flushStderr()

	opts := fledgev1.SessionOptions(ctx, e.Env, b, prof, log, rec, version)
	opts.Command, opts.Program, opts.Args = command, program, args
	opts.UI, opts.Store, opts.Stderr, opts.PluginCwd = u, storeIface, stderr, pluginCwd
	opts.Signals = sigs
	opts.Interrupt = sigs // Ctrl+C at a question takes the SIGINT path
	if b.Manifest.IsWasm() {
		w, err := wasmRuntime(e, entry.Granted, proj, b.DataDir, program, &opts)
		if err != nil {
			return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
		}
		defer w.Close()
	}
	out, err := fledgev1.Run(ctx, opts)
	if err != nil && out == nil {
		if errors.Is(err, fledgev1.ErrSandbox) {
			return exitErr(ExitCannotRun, "%v (reason: %s; strict policy in %s)", err, reason.SandboxUnavailable, e.cfg.File)
		}
		return exitErr(ExitCannotRun, "%v", err)
	}
	if err != nil {
		u.Warn(err.Error())
	}
	if out.Interrupted {
		return &ExitError{Code: ExitInterrupted}
	}
	if err := interpreterExit(e, entry.Name, program, prof.Plugin.Access, b.Paths, out.ExitCode, out.Result); err != nil {
		return err
	}
	return pluginExit(entry.Name, out.ExitCode, out.Result)
}

// interpreterExit explains a 126/127 exit the sandbox caused: the plugin's interpreter (or a
// version-manager shim on the way to it) needs a file the profile does not grant. The error
// names the file and the config line that grants it; nil when that is not the cause.
func interpreterExit(e *env, name, program string, a sandbox.Access, p policy.Paths, code int, res *sandbox.Result) error {
	if (code != 126 && code != 127) || (res != nil && res.Signal != "") {
		return nil
	}
	hint := e.InterpreterHint(p, program, a)
	if hint == "" {
		return nil
	}
	return &ExitError{Code: code, Msg: fmt.Sprintf("plugin %s exited with code %d: %s", name, code, hint)}
}

// runLegacy runs a plugin without a protocol as a whole program on the project (the legacy
// adapter in core). Confined by default; "unconfined" is an explicit policy choice that is
// announced every run and recorded.
func runLegacy(ctx context.Context, g *Globals, e *env, u ui.UI, rec *core.Recorder, b *core.Binding,
	prof policy.Profile, program string, args []string, sigs <-chan os.Signal) error {
	cwdPath := b.DataDir
	if b.Project != nil {
		cwdPath = b.Project.Root
	}
	if wd, err := os.Getwd(); err == nil && b.Project != nil && policy.Within(wd, b.Project.Root) {
		cwdPath = wd
	}
	unconfined := e.cfg.Sandbox.Legacy == policy.LegacyUnconfined
	if unconfined {
		u.Warn(fmt.Sprintf("running legacy plugin %s UNCONFINED (policy legacy = \"unconfined\" in %s)", b.Entry.Name, e.cfg.File))
	}
	spec := prof.Legacy
	spec.Name, spec.Path, spec.Args = b.Entry.Name, program, append([]string{program}, args...)
	ex, err := core.RunLegacy(core.LegacyOptions{
		Sandbox: e.sb, Spec: spec, Cwd: cwdPath, Stdin: g.Streams.In, Stdout: g.Streams.Out, Stderr: g.Streams.Err,
		Recorder: rec, Unconfined: unconfined, Signals: sigs, Ctx: ctx,
	})
	if err != nil {
		if errors.Is(err, core.ErrAudit) {
			return exitErr(ExitCannotRun, "legacy plugin %s not started: %v", b.Entry.Name, err)
		}
		return exitErr(ExitCannotRun, "legacy plugin %s: %v", b.Entry.Name, err)
	}
	if ex.Interrupted {
		return &ExitError{Code: ExitInterrupted}
	}
	if !unconfined {
		if err := interpreterExit(e, b.Entry.Name, program, spec.Access, b.Paths, ex.Code, ex.Result); err != nil {
			return err
		}
	}
	return pluginExit(b.Entry.Name, ex.Code, ex.Result)
}

// warnDegraded says once per session what the sandbox cannot enforce here.
func warnDegraded(u ui.UI, e *env, rep sandbox.Report) {
	if len(rep.Warnings) == 0 && rep.Confinement != "none" {
		return
	}
	msg := "sandbox degraded: " + strings.Join(rep.Warnings, "; ")
	if rep.Confinement == "none" {
		msg = "no filesystem confinement on this system (confinement: none); " + strings.Join(rep.Warnings, "; ")
	}
	if e.cfg.Sandbox.Strict {
		return // strict refuses at start instead; the error says why
	}
	// The session records it (sandbox_degraded, with its session id and plugin).
	u.Warn(msg)
}
