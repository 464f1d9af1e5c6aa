// SPDX-License-Identifier: MIT

// Package protocolhost is the one door through which fledge runs plugins, whatever their
// protocol: it opens the machine's side once (policy, the sandbox, the audit log), binds an
// installed plugin to what the user approved, and hands it to the adapter for its protocol.
// The adapters are the packages beside it, one per protocol (fledgev1, jsonrpc, runtimev1,
// invokev1, mcp, wasm), on the session core (core) and the tool catalogue (tools).
//
// The CLI (cmd/fledge) parses flags, calls this package and prints: it builds no sandbox
// spec, writes no audit record and reads no policy of its own.
package protocolhost

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/ui"
)

// MaybeRunChild runs the sandbox's confined child when this process was re-executed as one
// and never returns then; otherwise it returns at once. fledge's main calls it first, so
// that path pays for none of the CLI's initialisation.
func MaybeRunChild() { stub.MaybeRun() }

// Streams are a command's I/O.
type Streams struct {
	In  *os.File
	Out io.Writer
	Err io.Writer
}

// Options say where fledge's files are and how it was started.
type Options struct {
	ConfigDir string // resolved config dir (plugins.toml, config.toml, plugins/)
	StateDir  string // fledge's state (audit log, caches); plugins never see it
	// ProjectFlag is --project ("" to detect from the working directory).
	ProjectFlag    string
	NonInteractive bool
	Streams        Streams
	// Trace: every run of this host is traced (run --trace, tools call --trace): paths and
	// destinations outside the grants are kernel_denied records.
	Trace bool
	// SessionStarted, when set, is told the session id of a plugin command's run.
	SessionStarted func(id string)
	// Verbose (-v): servers' stderr (MCP, JSON-RPC 2.0) reaches the user's stderr live, as
	// well as their logs.
	Verbose bool
	// Launch: this host is opened to run a plugin right away (`fledge <command>`), so the
	// sandbox starts its helper processes now, while the run's start goes on.
	Launch bool
}

// Host is the machine's side of every command that runs a plugin: the config, the policy,
// the sandbox and the audit log, opened once.
type Host struct {
	Env    *core.Env
	opts   Options
	closed atomic.Bool
}

// Open loads policy, picks the sandbox and finds the audit log (opened on first use).
func Open(o Options) (*Host, error) {
	cfg, err := policy.Load(o.ConfigDir)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	ap, err := audit.DefaultPath()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	sb, err := platform.New(platform.Options{Launch: o.Launch})
	if err != nil {
		return nil, exitErr(ExitCannotRun, "sandbox: %v", err)
	}
	if p, ok := sb.(sandbox.Preparer); ok && o.Launch {
		p.Prepare(nil)
	}
	ends.hosts.Add(1)
	return &Host{Env: &core.Env{ConfigDir: o.ConfigDir, StateDir: o.StateDir, AuditPath: ap, Config: cfg, Sandbox: sb, Trace: o.Trace,
		ServerStderr: o.Verbose}, opts: o}, nil
}

// Close removes what the host's runs left (their cgroups and temp dirs) and closes the
// audit log; a failure is a warning on stderr.
func (h *Host) Close() {
	if h.closed.CompareAndSwap(false, true) {
		defer ends.hosts.Add(-1) // sessionend.go: a closed output no longer waits for this host
	}
	if err := h.Env.Close(); err != nil {
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: %v", err))
	}
}

func (h *Host) stderr() io.Writer {
	if h.opts.Streams.Err == nil {
		return io.Discard
	}
	return h.opts.Streams.Err
}

// Redact replaces every secret value this host handed a plugin (and its encodings) in
// text fledge is about to print: its error messages quote what plugins sent.
func (h *Host) Redact(s string) string { return h.Env.Redactor().Redact(s) }

// ConfigFile is the config.toml in force (named in messages that point at a setting).
func (h *Host) ConfigFile() string { return h.Env.Config.File }

// AuditPath is the audit log's path.
func (h *Host) AuditPath() string { return h.Env.AuditPath }

// auditLog opens the audit log for writing.
func (h *Host) auditLog() (*audit.Log, error) {
	l, err := h.Env.Audit()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	return l, nil
}

// registry loads plugins.toml.
func (h *Host) registry() (*plugin.Registry, error) {
	reg, err := plugin.LoadRegistry(h.Env.ConfigDir)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	return reg, nil
}

// project is the project of this invocation: --project, else detected from the working
// directory.
func (h *Host) project() (*project.Info, error) {
	cwd, _ := os.Getwd()
	proj, err := project.Detect(cwd, h.opts.ProjectFlag)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	return proj, nil
}

// pluginStream is where a plugin's bytes bound for the user go: unchanged to a file or a
// pipe, through the terminal sanitiser to a terminal (ui.PluginStream).
func pluginStream(w io.Writer) (io.Writer, func()) { return ui.PluginStream(w) }

// warnFunc writes fledge's warnings to w, sanitised.
func warnFunc(w io.Writer) func(string) { return ui.HostWarnings(w) }

// SetVersion is the fledge version told to plugins, servers and clients.
func SetVersion(v string) { core.Version = v }
