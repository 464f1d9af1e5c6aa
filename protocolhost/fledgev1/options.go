// SPDX-License-Identifier: MIT

// Package fledgev1 runs one fledge-v1 plugin session: it spawns the plugin under the
// sandbox, sends init, answers every request within its limits, and records every decision.
package fledgev1

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

// StateStore is the plugin's key/value storage (plugin.Store).
type StateStore interface {
	Get(key string) (string, bool)
	Set(key, value string) error
}

// Limits bound one session (policy.SessionLimits). Zero values take the policy defaults.
type Limits = policy.SessionLimits

// DefaultLimits are the limits of the default policy.
func DefaultLimits() Limits { return policy.Default().SessionLimits() }

// withDefaults fills every zero field from DefaultLimits (a negative ExecQueue means none).
func withDefaults(l Limits) Limits {
	d := DefaultLimits()
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fillD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&l.LineMax, d.LineMax)
	fill(&l.ConcurrentExecs, d.ConcurrentExecs)
	if l.ExecQueue < 0 {
		l.ExecQueue = 0
	} else if l.ExecQueue == 0 {
		l.ExecQueue = d.ExecQueue
	}
	fill(&l.PendingRequests, d.PendingRequests)
	fill(&l.OutputCap, d.OutputCap)
	fillD(&l.PromptTimeout, d.PromptTimeout)
	fillD(&l.ExecTimeoutDefault, d.ExecTimeoutDefault)
	fillD(&l.ExecTimeoutMax, d.ExecTimeoutMax)
	fillD(&l.CancelGrace, d.CancelGrace)
	fillD(&l.KillAfter, d.KillAfter)
	fillD(&l.DrainTimeout, d.DrainTimeout)
	return l
}

// PluginMeta identifies the plugin being run.
type PluginMeta struct {
	Name           string
	Version        string
	Dir            string // installed copy
	DataDir        string // private writable dir
	Source         string
	ManifestDigest string
}

// Options configure one session. The caller (cmd/fledge) resolves policy into concrete
// values; this package makes no policy decisions beyond the spec's capability rules.
type Options struct {
	SessionID     string
	FledgeVersion string
	Plugin        PluginMeta
	Command       string   // the plugin command being run
	Program       string   // absolute path of the plugin binary
	Args          []string // user arguments after the command
	Grants        protocol.Capabilities
	// Declared is what the approved manifest asks for: a refusal of a capability it never
	// declared is recorded capability_not_declared, one the user did not grant
	// capability_not_granted, so an auditor can tell the two apart.
	Declared protocol.Capabilities

	Project     *project.Info     // nil outside a project
	InitProject *protocol.Project // what init says about it (git info, credentials stripped)

	UI      ui.UI
	Sandbox sandbox.Sandbox
	Audit   audit.Recorder
	Store   StateStore // nil: storage unavailable (load answers null)
	Stderr  io.Writer  // where the plugin's stderr is forwarded (live, unchanged)

	// PluginSandbox starts the plugin itself when it is not a native process (a WASM module:
	// package wasm); nil means Sandbox. Execs and git always go through Sandbox.
	PluginSandbox sandbox.Sandbox
	// PluginStartDetails are added to the plugin_start record (a WASM module's runtime,
	// sha256, preopens and limits).
	PluginStartDetails map[string]any

	// PluginSpec is the sandbox spec for the plugin process; Path, Args, Dir, stdio are set
	// by the session.
	PluginSpec sandbox.Spec
	// PluginDir is the directory the plugin process starts in.
	PluginCwd string

	// ExecSpec carries Access, Env, Network, Limits (without Timeout), Strict for execs.
	ExecSpec sandbox.Spec
	// GitAccess is the profile of the host's own git calls on the project (metadata).
	GitAccess sandbox.Access
	// ExecRoots are the allowed cwd roots; ExecRoots[0] is the base for relative cwds.
	ExecRoots []string

	MetadataEnv map[string]string
	Limits      Limits

	// Signals delivers SIGINT/SIGTERM (nil: no signal handling).
	Signals <-chan os.Signal

	// Recorder writes this session's audit records; nil makes one from Audit, SessionID
	// and Plugin.
	Recorder *core.Recorder
	// Interrupt is where the session reports Ctrl+C pressed at a question (ui.ErrInterrupted:
	// the form read it as a key, so no SIGINT came). Give it the channel Signals reads, so the
	// interrupt takes the signal's path: cancel user_interrupt, SIGTERM, SIGKILL, exit 130.
	// Nil: Ctrl+C at a question cancels only that question.
	Interrupt chan<- os.Signal
}

// Outcome says how a session ended.
type Outcome struct {
	ExitCode    int
	Interrupted bool
	StoppedBy   string // why fledge stopped the plugin ("" if it ended by itself)
	Result      *sandbox.Result
	Malformed   int
}

// SessionOptions are the Options every fledge-v1 session of an installed plugin starts
// from, whoever runs it (`fledge <cmd>`, a command offered as a tool over MCP): the plugin,
// its grants, what init says about the project, and the whole profile policy built. The
// caller adds what is its own: Command, Program, Args, UI, Store, Stderr, PluginCwd,
// Signals.
func SessionOptions(ctx context.Context, env *core.Env, b *core.Binding, prof policy.Profile,
	log audit.Recorder, rec *core.Recorder, fledgeVersion string) Options {
	return Options{
		SessionID:     rec.SessionID(),
		FledgeVersion: fledgeVersion,
		Plugin: PluginMeta{
			Name: b.Entry.Name, Version: b.Entry.Version, Dir: b.Dir, DataDir: b.DataDir,
			Source: b.Entry.Source, ManifestDigest: b.Entry.ManifestSHA256,
		},
		Grants:      Capabilities(b.Entry.Granted),
		Declared:    declared(b.Manifest),
		Project:     b.Project,
		InitProject: InitProject(ctx, SandboxedGit(env.Sandbox, prof.Git), b.Project),
		GitAccess:   prof.Git,
		Sandbox:     env.Sandbox,
		Audit:       log,
		Recorder:    rec,
		PluginSpec:  prof.Plugin,
		ExecSpec:    prof.Exec,
		ExecRoots:   prof.ExecRoots,
		MetadataEnv: prof.MetadataEnv,
		Limits:      prof.Session,
	}
}

// declared is what the approved manifest asks for (nothing when there is no manifest).
func declared(m *plugin.Manifest) protocol.Capabilities {
	if m == nil {
		return protocol.Capabilities{}
	}
	return Capabilities(m.Declared())
}

// Capabilities is what init tells the plugin it was granted.
func Capabilities(g policy.Grants) protocol.Capabilities {
	return protocol.Capabilities{Exec: g.Exec, Store: g.Store, Metadata: g.Metadata, Network: g.Network, Filesystem: g.FS()}
}

// InitProject is what init tells the plugin about the project: git info read by a confined
// git, credentials stripped from the remote URL.
func InitProject(ctx context.Context, git project.Runner, p *project.Info) *protocol.Project {
	if p == nil {
		return nil
	}
	out := &protocol.Project{Name: p.Name, Root: p.Root, Language: p.Language}
	if gi := project.ReadGitInfoWith(ctx, git, p.Root); gi != nil {
		out.Git = &protocol.GitInfo{
			Branch: gi.Branch, Dirty: gi.Dirty, Remote: gi.Remote,
			RemoteURL: policy.StripURLCredentials(gi.RemoteURL),
		}
	}
	return out
}
