// SPDX-License-Identifier: MIT

package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox"
)

// SessionLimits bound one plugin session, whatever its protocol.
type SessionLimits struct {
	LineMax            int           // bytes per protocol line from the plugin
	ConcurrentExecs    int           // execs running at once
	ExecQueue          int           // execs waiting for a slot; past it, an error reply
	PendingRequests    int           // id-bearing requests in flight
	PromptTimeout      time.Duration // unanswered prompt -> cancel "timeout"
	StartupTimeout     time.Duration // plugin not ready in time -> launch_failed (invoke-v1)
	ExecTimeoutDefault time.Duration
	ExecTimeoutMax     time.Duration
	OutputCap          int           // bytes kept per exec stream
	CancelGrace        time.Duration // cancel -> SIGTERM
	KillAfter          time.Duration // cancel -> SIGKILL
	DrainTimeout       time.Duration // after the plugin exits, how long workers may take to finish
}

// The spec's ladder (invariant 10): SIGTERM 5 s after a cancel, SIGKILL after 10 s.
const (
	CancelGrace  = 5 * time.Second
	KillAfter    = 10 * time.Second
	DrainTimeout = 5 * time.Second
)

// SessionLimits are this policy's session bounds.
func (c *Config) SessionLimits() SessionLimits {
	return SessionLimits{
		LineMax:            int(c.Limits.LineMax),
		ConcurrentExecs:    c.Limits.ConcurrentExecs,
		ExecQueue:          c.Limits.ExecQueue,
		PendingRequests:    c.Limits.PendingRequests,
		PromptTimeout:      c.Limits.PromptTimeout,
		StartupTimeout:     c.Limits.StartupTimeout,
		ExecTimeoutDefault: c.Sandbox.TimeoutDefault,
		ExecTimeoutMax:     c.Sandbox.TimeoutMax,
		OutputCap:          int(c.Sandbox.OutputCap),
		CancelGrace:        CancelGrace,
		KillAfter:          KillAfter,
		DrainTimeout:       DrainTimeout,
	}
}

// ExecTimeout is the timeout rule of every exec, whatever protocol asked for it: nil is the
// default; a value that is not a positive number is an error; a value above max is clamped
// to max (clamped true), as the Rust fledge host does, so a plugin asking for more still runs.
func ExecTimeout(seconds *float64, def, max time.Duration) (d time.Duration, clamped bool, err error) {
	if seconds == nil {
		return def, false, nil
	}
	s := *seconds
	if math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 {
		return 0, false, fmt.Errorf("timeout must be a positive number of seconds, got %v", s)
	}
	if s > max.Seconds() {
		return max, true, nil
	}
	return time.Duration(s * float64(time.Second)), false, nil
}

// CallTimeout is the timeout of one call into a long-lived plugin (a runtime-v1 execute, an
// invoke-v1 request): the plugin's own [plugin] timeout (a Go duration such as "30s") under
// the exec timeout rule, else the default. An unusable value gives the default and an error
// to warn about.
func CallTimeout(manifestTimeout string, lim SessionLimits) (time.Duration, error) {
	manifestTimeout = strings.TrimSpace(manifestTimeout)
	if manifestTimeout == "" {
		return lim.ExecTimeoutDefault, nil
	}
	d, err := time.ParseDuration(manifestTimeout)
	if err != nil {
		return lim.ExecTimeoutDefault, fmt.Errorf("[plugin] timeout = %q is not a duration: the default %s applies", manifestTimeout, lim.ExecTimeoutDefault)
	}
	s := d.Seconds()
	t, _, err := ExecTimeout(&s, lim.ExecTimeoutDefault, lim.ExecTimeoutMax)
	if err != nil {
		return lim.ExecTimeoutDefault, fmt.Errorf("[plugin] timeout: %w: the default %s applies", err, lim.ExecTimeoutDefault)
	}
	return t, nil
}

// Profile is everything policy decides about running one plugin: what the plugin process,
// its execs and the host's git calls may reach, their limits, and the session's bounds.
// cmd/fledge and every protocol adapter take it as it is; nothing re-derives any of it.
type Profile struct {
	// Plugin is the plugin process's spec: Env, Access, Network, UnixSockets, Limits,
	// PrivateTmp, Strict. Kind, Name, Path, Args, Dir and stdio are the adapter's.
	Plugin sandbox.Spec
	// Exec is the spec of each command the plugin asks for (Limits.Timeout is the default;
	// ExecTimeout applies a requested one).
	Exec sandbox.Spec
	// Legacy is the spec of a legacy plugin run as a whole program (legacy = "confined").
	Legacy sandbox.Spec
	// Git is the access of the host's own git calls on the project (metadata).
	Git sandbox.Access
	// ExecRoots are the allowed exec cwd roots; ExecRoots[0] is the base for relative cwds.
	ExecRoots []string
	// MetadataEnv is the environment of the host's git calls.
	MetadataEnv map[string]string
	Session     SessionLimits
}

// ProfileInput is what a Profile is built from.
type ProfileInput struct {
	Paths  Paths
	Grants Grants
	// Environ is the user's environment (os.Environ()); only what policy lets through
	// reaches any child.
	Environ []string
	// PluginEnv are the FLEDGE_* variables of the plugin process.
	PluginEnv map[string]string
	// LegacyEnv are the variables of a legacy plugin.
	LegacyEnv map[string]string
	// Read are the plugin's read grants (readgrant.go): read-only for the plugin process
	// and its commands.
	Read []string
	// Secrets are the plugin process's secret variables: an unbound secret's value, a
	// bound secret's placeholder (never a command's), past the credential filter because
	// the user granted them.
	Secrets map[string]string
	// Bound are the bound secrets (their values stay in fledge: the session's network puts
	// each into requests to its destinations), and Placeholders what the plugin's commands
	// hold of them under their names (worthless anywhere else).
	Bound        []egress.Secret
	Placeholders map[string]string
	// Image: the plugin is a container image, the root of its view (ImageAccess).
	Image bool
}

// Build is the one call that turns policy, grants and paths into a Profile.
func (c *Config) Build(in ProfileInput) Profile {
	p := in.Paths
	roots := []string{}
	if p.ProjectRoot != "" {
		roots = append(roots, p.ProjectRoot)
	}
	if p.PluginDir != "" {
		roots = append(roots, p.PluginDir)
	}
	// The detected version managers' own variables (PYENV_VERSION, ...) pass through.
	allow := append(append([]string{}, c.Sandbox.EnvAllow...), managerEnv(p)...)
	// One network for the session: the plugin process and every command it runs share it
	// (a command never gets more network than its plugin).
	net := c.PluginNetwork(in.Grants)
	var eg sandbox.Egress // a nil *egress.Session must stay a nil interface
	if s := c.Egress(in.Grants); s != nil {
		s.Policy.Secrets = in.Bound
		eg = s
	}
	pluginAccess, execAccess := PluginAccess(p, in.Grants, c), ExecAccess(p, c)
	if read := readGrants(in.Read, p); len(read) > 0 {
		pluginAccess.ReadOnly = append(pluginAccess.ReadOnly, read...)
		execAccess.ReadOnly = append(execAccess.ReadOnly, read...)
	}
	if in.Image {
		pluginAccess = ImageAccess(p, in.Grants, c, in.Read)
	}
	return Profile{
		Plugin: sandbox.Spec{
			Env:         ChildEnv(in.Environ, allow, withSecrets(in.PluginEnv, in.Secrets)),
			SecretNames: secretNames(in.PluginEnv, in.Secrets),
			Access:      pluginAccess,
			Network:     net,
			Egress:      eg,
			// Unix sockets follow policy; a plugin's network grant does not open them.
			UnixSockets: c.UnixSocketsAllowed(),
			Limits:      c.PluginLimits(),
			PrivateTmp:  true,
			Strict:      c.Sandbox.Strict,
		},
		Exec: sandbox.Spec{
			Env:         ChildEnv(in.Environ, allow, in.Placeholders),
			Access:      execAccess,
			Network:     net,
			Egress:      eg,
			UnixSockets: c.UnixSocketsAllowed(),
			Limits:      c.ExecLimits(),
			Strict:      c.Sandbox.Strict,
		},
		Legacy: sandbox.Spec{
			Env: ChildEnv(in.Environ, allow, withSecrets(in.LegacyEnv, in.Secrets)), SecretNames: secretNames(in.LegacyEnv, in.Secrets),
			Access: LegacyAccess(p, c), Network: net, Egress: eg, UnixSockets: c.UnixSocketsAllowed(),
			Limits: c.PluginLimits(), PrivateTmp: true, Strict: c.Sandbox.Strict,
		},
		Git:         GitAccess(p),
		ExecRoots:   roots,
		MetadataEnv: MetadataEnv(in.Environ, c.Sandbox.EnvAllow),
		Session:     c.SessionLimits(),
	}
}

// HookSpec is the profile of an install hook the user asked for (--run-hooks): a confined
// exec whose only writable place is the staged plugin dir (p.PluginDir = p.PluginDataDir),
// bounded by timeout_max. Kind, Name, Path, Args, Dir and stdio are the caller's.
func (c *Config) HookSpec(p Paths, environ []string) sandbox.Spec {
	limits := c.ExecLimits()
	limits.Timeout = c.Sandbox.TimeoutMax
	return sandbox.Spec{
		Env: ChildEnv(environ, c.Sandbox.EnvAllow, nil),
		// Install hooks (run only when the user asks) keep the network unless policy denies it.
		Access: ExecAccess(p, c), Network: c.Sandbox.Network != NetworkDeny, UnixSockets: c.UnixSocketsAllowed(),
		Limits: limits, PrivateTmp: true, Strict: c.Sandbox.Strict,
	}
}

// secretNames are the granted secrets withSecrets passes on past set, sorted: what the
// process receives, named in its record.
func secretNames(set, secrets map[string]string) []string {
	out := []string{}
	for n := range secrets {
		if _, own := set[n]; !own {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// withSecrets is set plus the granted secrets (fledge's own variables win).
func withSecrets(set, secrets map[string]string) map[string]string {
	if len(secrets) == 0 {
		return set
	}
	out := make(map[string]string, len(set)+len(secrets))
	for k, v := range secrets {
		out[k] = v
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}
