// Package protocolhost runs one fledge-v1 plugin session: it spawns the plugin under the
// sandbox, sends init, answers every request within its limits, and records every decision.
package protocolhost

import (
	"io"
	"os"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

// StateStore is the plugin's key/value storage (plugin.Store).
type StateStore interface {
	Get(key string) (string, bool)
	Set(key, value string) error
}

// Limits bound one session. Zero values take the defaults from DefaultLimits.
type Limits struct {
	LineMax            int           // bytes per protocol line from the plugin
	ConcurrentExecs    int           // execs running at once
	ExecQueue          int           // execs waiting for a slot; past it, an error reply
	PendingRequests    int           // id-bearing requests in flight
	PromptTimeout      time.Duration // unanswered prompt -> cancel "timeout"
	ExecTimeoutDefault time.Duration
	ExecTimeoutMax     time.Duration
	OutputCap          int           // bytes kept per exec stream
	CancelGrace        time.Duration // cancel -> SIGTERM
	KillAfter          time.Duration // cancel -> SIGKILL
	DrainTimeout       time.Duration // after the plugin exits, how long workers may take to finish
}

// DefaultLimits are the documented defaults (DESIGN.md, the spec).
func DefaultLimits() Limits {
	return Limits{
		LineMax:            1 << 20,
		ConcurrentExecs:    4,
		ExecQueue:          64,
		PendingRequests:    256,
		PromptTimeout:      5 * time.Minute,
		ExecTimeoutDefault: 30 * time.Second,
		ExecTimeoutMax:     300 * time.Second,
		OutputCap:          10 << 20,
		CancelGrace:        5 * time.Second,
		KillAfter:          10 * time.Second,
		DrainTimeout:       5 * time.Second,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.LineMax <= 0 {
		l.LineMax = d.LineMax
	}
	if l.ConcurrentExecs <= 0 {
		l.ConcurrentExecs = d.ConcurrentExecs
	}
	if l.ExecQueue < 0 {
		l.ExecQueue = 0
	} else if l.ExecQueue == 0 {
		l.ExecQueue = d.ExecQueue
	}
	if l.PendingRequests <= 0 {
		l.PendingRequests = d.PendingRequests
	}
	if l.PromptTimeout <= 0 {
		l.PromptTimeout = d.PromptTimeout
	}
	if l.ExecTimeoutDefault <= 0 {
		l.ExecTimeoutDefault = d.ExecTimeoutDefault
	}
	if l.ExecTimeoutMax <= 0 {
		l.ExecTimeoutMax = d.ExecTimeoutMax
	}
	if l.OutputCap <= 0 {
		l.OutputCap = d.OutputCap
	}
	if l.CancelGrace <= 0 {
		l.CancelGrace = d.CancelGrace
	}
	if l.KillAfter <= 0 {
		l.KillAfter = d.KillAfter
	}
	if l.DrainTimeout <= 0 {
		l.DrainTimeout = d.DrainTimeout
	}
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

	Project     *project.Info     // nil outside a project
	InitProject *protocol.Project // what init says about it (git info, credentials stripped)

	UI      ui.UI
	Sandbox sandbox.Sandbox
	Audit   audit.Recorder
	Store   StateStore // nil: storage unavailable (load answers null)
	Stderr  io.Writer  // where the plugin's stderr is forwarded (live, unchanged)

	// PluginSandbox starts the plugin itself when it is not a native process (a WASM module:
	// wasmhost); nil means Sandbox. Execs and git always go through Sandbox.
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
}

// Outcome says how a session ended.
type Outcome struct {
	ExitCode    int
	Interrupted bool
	Result      *sandbox.Result
	Malformed   int
}
