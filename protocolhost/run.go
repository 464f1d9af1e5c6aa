// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/protocolhost/legacy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

// RunCommand runs one plugin command (`fledge <command> [args]`) to its end: a fledge-v1
// plugin (native or WebAssembly) through its session, a legacy plugin as a whole program.
// The error is an *ExitError carrying fledge's exit status: the plugin's own, or why it
// could not run.
func (h *Host) RunCommand(ctx context.Context, command string, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e := h.Env
	entry, b, program, log, err := h.bindCommand(command)
	if err != nil {
		return err
	}

	st := h.opts.Streams
	ni := h.opts.NonInteractive
	// The profile first: the sandbox prepares the plugin's first run while the session's
	// recorder asks the sandbox's report.
	prof := e.Profile(b, os.Environ(), b.PluginEnv(command, ni), b.PluginEnv("", ni))
	prepareSession(e.Sandbox, b, prof)
	con := ui.New(ui.Options{In: st.In, Out: st.Out, Err: st.Err, NonInteractive: ni})
	defer con.Close()
	u := e.RedactWarnings(con)
	rec := e.NewRecorder(log, b.Ref, u.Warn)
	if h.opts.SessionStarted != nil {
		h.opts.SessionStarted(rec.SessionID())
	}
	h.warnDegraded(u)

	// Every ending of the run (Ctrl+C, SIGTERM, SIGHUP, a closed stdout) ends the session
	// through the plugin's ladder (sessionend.go).
	sigs := make(chan os.Signal, 2)
	notifyEnd(sigs)
	defer stopEnd(sigs)

	wd, _ := os.Getwd()
	if b.Manifest.Plugin.Protocol == "" {
		return h.runLegacy(ctx, u, rec, b, prof, program, args, wd, sigs)
	}
	return h.runFledgeV1(ctx, u, rec, log, entry, b, prof, command, program, args, wd, sigs)
}

// prepareSession has the sandbox start what the plugin's launch will need (its helper
// processes, its groups) while the session's start goes on: the recorder, the plugin_start
// record and its fsync. Only a native fledge-v1 plugin is started with prof.Plugin.
func prepareSession(sb sandbox.Sandbox, b *core.Binding, prof policy.Profile) {
	p, ok := sb.(sandbox.Preparer)
	if !ok || b.Manifest.Plugin.Protocol != protocol.Version || b.Manifest.IsWasm() {
		return
	}
	spec := prof.Plugin
	spec.Name = b.Entry.Name
	p.Prepare(&spec)
}

// bindCommand finds the plugin that provides command and binds it to the project: its entry,
// binding, program and the audit log, or the exit error of why the command cannot run.
// Nothing of the plugin starts here.
func (h *Host) bindCommand(command string) (*plugin.Entry, *core.Binding, string, *audit.Log, error) {
	e := h.Env
	reg, err := h.registry()
	if err != nil {
		return nil, nil, "", nil, err
	}
	entry, err := reg.FindCommand(command)
	if err != nil {
		if errors.Is(err, plugin.ErrUnknownCommand) {
			return nil, nil, "", nil, exitErr(ExitUnknownCmd, "unknown command %q: no installed plugin provides it (see 'fledge plugins list')", command)
		}
		return nil, nil, "", nil, exitErr(ExitCannotRun, "%v", err)
	}
	proj, err := h.project()
	if err != nil {
		return nil, nil, "", nil, err
	}
	h.noteProject(proj)
	log, err := h.auditLog()
	if err != nil {
		return nil, nil, "", nil, err
	}
	b, err := e.Bind(entry, proj)
	if err != nil {
		return nil, nil, "", nil, exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	cmdSpec := b.Manifest.Command(command)
	if cmdSpec == nil {
		e.Refuse(b.Ref, audit.RefusalOther, command, "the plugin no longer declares this command")
		return nil, nil, "", nil, exitErr(ExitUnknownCmd, "plugin %s no longer declares command %q; reinstall it", entry.Name, command)
	}
	program, err := e.Program(b, cmdSpec.Binary)
	if err != nil {
		return nil, nil, "", nil, exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	if err := h.commandProtocol(b, entry.Name, command); err != nil {
		return nil, nil, "", nil, err
	}
	return entry, b, program, log, nil
}

// commandProtocol refuses a plugin whose protocol is not run as a command (its tools and
// hooks have their own commands); nil for fledge-v1 and legacy plugins.
func (h *Host) commandProtocol(b *core.Binding, name, command string) error {
	e := h.Env
	switch b.Manifest.Plugin.Protocol {
	case "", protocol.Version:
	case plugin.ProtocolJSONRPC:
		return exitErr(ExitUsage, "plugin %s speaks jsonrpc-2.0: run its tools with 'fledge tools call' (see 'fledge tools list') and its hooks with 'fledge hooks run'", name)
	case plugin.ProtocolMCP:
		e.Refuse(b.Ref, audit.RefusalOther, command, "an MCP server is not run as a command")
		return exitErr(ExitCannotRun, "plugin %s is an MCP server: its tools run with 'fledge tools call' or through 'fledge serve --mcp', not as a command", name)
	default:
		e.Refuse(b.Ref, audit.RefusalOther, command, "protocol "+b.Manifest.Plugin.Protocol+" is not run as a command")
		return exitErr(ExitCannotRun, "plugin %s speaks protocol %q, but this fledge only speaks %q: upgrade fledge", name, b.Manifest.Plugin.Protocol, protocol.Version)
	}
	return nil
}

// runFledgeV1 runs a fledge-v1 plugin's command through its session (native or WebAssembly)
// and turns the outcome into fledge's exit status.
func (h *Host) runFledgeV1(ctx context.Context, u ui.UI, rec *core.Recorder, log *audit.Log, entry *plugin.Entry,
	b *core.Binding, prof policy.Profile, command, program string, args []string, wd string, sigs chan os.Signal) error {
	e := h.Env
	st := h.opts.Streams
	store := h.commandStore(u, entry)

	stderr, flushStderr := pluginStream(st.Err)
	defer flushStderr()

	opts := fledgev1.SessionOptions(ctx, e, b, prof, log, rec, core.FledgeVersion())
	opts.Command, opts.Program, opts.Args = command, program, args
	// The plugin starts where the user is when it may read it (as the Rust fledge host does).
	opts.UI, opts.Store, opts.Stderr, opts.PluginCwd = u, store, stderr, b.StartDir(wd, prof.Plugin.Access)
	opts.Signals = sigs
	opts.Interrupt = sigs // Ctrl+C at a question takes the SIGINT path
	if b.Manifest.IsWasm() {
		w, err := fledgev1.WasmRuntime(e, b, program, &opts)
		if err != nil {
			return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
		}
		defer w.Close()
	}
	out, err := fledgev1.Run(ctx, opts)
	if err != nil && out == nil {
		if errors.Is(err, fledgev1.ErrSandbox) {
			return h.strictRefusal(err)
		}
		return exitErr(ExitCannotRun, "%v", err)
	}
	if err != nil {
		u.Warn(err.Error())
	}
	if out.Interrupted {
		return &ExitError{Code: ExitInterrupted}
	}
	if err := h.interpreterExit(entry.Name, program, prof.Plugin.Access, b.Paths, out.ExitCode, out.Result); err != nil {
		return err
	}
	return pluginExit(entry.Name, out.ExitCode, out.Result)
}

// commandStore opens the plugin's storage when it is granted; nil (and a warning) when it
// cannot be opened, since a plugin runs without its storage rather than not at all.
func (h *Host) commandStore(u ui.UI, entry *plugin.Entry) fledgev1.StateStore {
	if !entry.Granted.Store {
		return nil
	}
	s, err := plugin.OpenStore(plugin.StatePath(h.Env.ConfigDir, entry.Name), plugin.DefaultStoreLimits)
	if err != nil {
		u.Warn(fmt.Sprintf("plugin storage unavailable: %v", err))
		return nil
	}
	for _, w := range s.Warnings() {
		u.Warn(w)
	}
	return s
}

// interpreterExit explains a 126/127 exit the sandbox caused: the plugin's interpreter (or a
// version-manager shim on the way to it) needs a file the profile does not grant. The error
// names the file and the config line that grants it; nil when that is not the cause.
func (h *Host) interpreterExit(name, program string, a sandbox.Access, p policy.Paths, code int, res *sandbox.Result) error {
	if (code != 126 && code != 127) || (res != nil && res.Signal != "") {
		return nil
	}
	hint := h.Env.InterpreterHint(p, program, a)
	if hint == "" {
		return nil
	}
	return &ExitError{Code: code, Msg: fmt.Sprintf("plugin %s exited with code %d: %s", name, code, hint)}
}

// runLegacy runs a plugin without a protocol as a whole program (the legacy adapter).
// Confined by default; "unconfined" is an explicit policy choice that is announced every run
// and recorded.
func (h *Host) runLegacy(ctx context.Context, u ui.UI, rec *core.Recorder, b *core.Binding,
	prof policy.Profile, program string, args []string, wd string, sigs <-chan os.Signal) error {
	cfg := h.Env.Config
	unconfined := cfg.Sandbox.Legacy == policy.LegacyUnconfined
	if unconfined {
		u.Warn(fmt.Sprintf("running legacy plugin %s UNCONFINED (policy legacy = \"unconfined\" in %s)", b.Entry.Name, cfg.File))
	}
	spec := prof.Legacy
	spec.Name, spec.Path, spec.Args = b.Entry.Name, program, append([]string{program}, args...)
	// A legacy program runs on the project, its read-write place: under the user when the
	// user stands in the project, else at the project root (else its data dir), never in a
	// directory outside the project it merely may read, where writing beside itself fails.
	if b.Project == nil || wd == "" || !policy.Within(core.Resolved(wd), b.Project.Root) {
		wd = ""
	}
	st := h.opts.Streams
	ex, err := legacy.Run(legacy.Options{
		Sandbox: h.Env.Sandbox, Spec: spec, Cwd: b.StartDir(wd, spec.Access), Stdin: st.In, Stdout: st.Out, Stderr: st.Err,
		Recorder: rec, Unconfined: unconfined, Signals: sigs, Ctx: ctx,
	})
	if err != nil {
		if errors.Is(err, core.ErrAudit) {
			return exitErr(ExitCannotRun, "legacy plugin %s not started: %v", b.Entry.Name, err)
		}
		if errors.Is(err, core.ErrSandbox) {
			return h.strictRefusal(err)
		}
		return exitErr(ExitCannotRun, "legacy plugin %s: %v", b.Entry.Name, err)
	}
	if ex.Interrupted {
		return &ExitError{Code: ExitInterrupted}
	}
	if !unconfined {
		if err := h.interpreterExit(b.Entry.Name, program, spec.Access, b.Paths, ex.Code, ex.Result); err != nil {
			return err
		}
	}
	return pluginExit(b.Entry.Name, ex.Code, ex.Result)
}

// strictRefusal is the error of a run the strict policy refused: the sandbox's reason,
// said once, and where the policy is.
func (h *Host) strictRefusal(err error) error {
	return exitErr(ExitCannotRun, "%v (reason: %s; strict policy in %s)", err, reason.SandboxUnavailable, h.Env.Config.File)
}

// warnDegraded says once per session, in one line, what the sandbox cannot enforce here
// and the fix; `fledge doctor` has the detail and the session's sandbox_degraded record
// the whole list.
func (h *Host) warnDegraded(u ui.UI) {
	rep := h.Env.Sandbox.Report()
	if len(rep.Warnings) == 0 && rep.Confinement != "none" {
		return
	}
	if h.Env.Config.Sandbox.Strict {
		return // strict refuses at start instead; the error says why
	}
	// The session records it (sandbox_degraded, with its session id and plugin).
	u.Warn(DegradedLine(rep))
}

// DegradedLine is the one line a degraded run prints: what is missing, why, and the fix.
func DegradedLine(rep sandbox.Report) string {
	var missing, fixes []string
	known := 0
	if rep.Confinement == "none" {
		missing = append(missing, "filesystem confinement (no Landlock)")
		fixes = append(fixes, "a kernel with Landlock (5.13 or later, lsm=landlock)")
	}
	if rep.OS == "linux" && rep.FilesystemView == "none" {
		m := "private filesystem view, pid and IPC namespaces"
		if !rep.UserNamespaces {
			m += " (no user namespaces)"
			fixes = append(fixes, "allow unprivileged user namespaces (Ubuntu: an AppArmor profile for fledge, or kernel.apparmor_restrict_unprivileged_userns=0)")
		}
		missing = append(missing, m)
	}
	if rep.CgroupMode == "none" || !rep.CgroupWritable {
		missing = append(missing, "memory/pids/cpu limits (no writable cgroup)")
		fixes = append(fixes, "run fledge in a systemd user session on cgroup v2")
	}
	if strings.HasPrefix(rep.NetworkEgress, "none") {
		missing = append(missing, "network by destination (a plugin granted one gets no network)")
	}
	for _, w := range rep.Warnings {
		if !strings.Contains(w, "cgroup") && !strings.Contains(w, "filesystem view") && !strings.Contains(w, "IPC namespace") {
			known++ // said by doctor only
		}
	}
	line := "sandbox degraded: no " + strings.Join(missing, "; no ")
	if len(missing) == 0 {
		line = "sandbox degraded"
	}
	if known > 0 {
		line += fmt.Sprintf(" (and %d more)", known)
	}
	if len(fixes) > 0 {
		line += "; fix: " + strings.Join(fixes, "; ")
	}
	return line + "; 'fledge doctor' has the detail"
}
