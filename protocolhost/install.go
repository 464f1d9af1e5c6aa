// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/protocolhost/jsonrpc"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
)

// InstallRequest is one `fledge plugins install`.
type InstallRequest struct {
	Source string
	Yes    bool
	// Grant, when GrantSet, is --grant: exactly these capabilities.
	Grant    string
	GrantSet bool
	RunHooks bool
	// Protocol and FromDir install self-describing plugins (bare executables whose
	// handshake says what they are).
	Protocol string
	FromDir  string
	// Asker asks the install questions (nil: none can be asked).
	Asker          plugin.Asker
	NonInteractive bool
	// Package is how a package source (npm:PKG) is installed (install_package.go).
	Package PackageRequest
}

// installer is one install command: its audit log and where it talks.
type installer struct {
	h      *Host
	log    *audit.Log
	out    io.Writer // results
	errOut io.Writer // questions' context, warnings, plugin bytes
	// update names the plugin being updated ("": an install): a refusal then says
	// "update NAME", not "install SOURCE".
	update string
	// sync is the fledge.lock entry being installed by `plugins sync` (nil otherwise):
	// exactly its wheels, digest, grants and tool pins (lockfile.go).
	sync *plugin.LockEntry
}

// Install installs a plugin, granting only what the user approves, and records it.
func (h *Host) Install(ctx context.Context, o InstallRequest) error {
	if ctx == nil {
		ctx = context.Background()
	}
	base := plugin.InstallOptions{
		ConfigDir:      h.Env.ConfigDir,
		Source:         o.Source,
		Yes:            o.Yes,
		NonInteractive: o.NonInteractive,
		RunHooks:       o.RunHooks,
		Asker:          o.Asker,
		Out:            h.stderr(),
		Managed:        h.Env.Config.Managed,
	}
	if o.GrantSet {
		gr, err := policy.ParseGrantList(o.Grant)
		if err != nil {
			return exitErr(ExitUsage, "--grant: %v", err)
		}
		base.Grant = &gr
	}
	log, err := h.auditLog()
	if err != nil {
		return err
	}
	in := &installer{h: h, log: log, out: h.opts.Streams.Out, errOut: h.stderr()}
	if in.out == nil {
		in.out = io.Discard
	}
	base.RunHook = in.hookRunner()
	if err := in.checkSource(o.Source); err != nil {
		return err
	}
	if plugin.IsPackageSource(o.Source) {
		return in.runPackage(ctx, &o, base, nil, nil)
	}
	if remoteSource(o.Source) {
		// An http(s) URL is a remote MCP server when it answers initialize, else a git
		// remote as before (install_remote.go).
		if handled, err := in.runRemote(ctx, &o, base); handled {
			return err
		}
	}
	if o.Protocol != "" || o.FromDir != "" {
		return in.runSelfDescribing(ctx, &o, base)
	}
	base.Handshake = in.handshakeHook(nil)
	return in.installOne(ctx, base)
}

// what is what a refusal is about: "install SOURCE", or "update NAME".
func (in *installer) what(source string) string {
	if in.update != "" {
		return "update " + in.update
	}
	return "install " + source
}

// installOne runs one install and records it.
func (in *installer) installOne(ctx context.Context, io plugin.InstallOptions) error {
	e := in.h.Env
	entry, err := plugin.Install(ctx, io)
	// One install is one session: its records share an id and say what the sandbox enforces.
	if err != nil {
		src := io.Source
		if io.RecordSource != "" {
			src = io.RecordSource
		}
		details := map[string]any{"source": src, "error": err.Error()}
		if errors.Is(err, ErrNotMCPServer) {
			details["rolled_back"] = true
		}
		ref := refusedRef(io.Source)
		if ref != nil {
			ref.Source = src // an npm package's, not the dir it was fetched into
		}
		_ = e.NewRecorder(in.log, ref, nil).RecordNow(audit.EventInstall, audit.Deny, reason.Code(installReason(err)), details)
		return exitErr(installExit(err), "%s: %v", in.what(src), err)
	}
	rec := e.NewRecorder(in.log, entryRef(entry), nil)
	details := map[string]any{"source": entry.Source, "commands": entry.Commands}
	if d := entry.PinnedDigest(); d != "" {
		details["digest"] = d // the image it is pinned to
	}
	_ = rec.RecordNow(audit.EventInstall, audit.Allow, reason.OK, details)
	_ = rec.RecordNow(audit.EventGrant, audit.Allow, reason.OK, map[string]any{audit.DetailCapabilities: entry.Granted.Names()})
	fledgev1.PrecompileWasm(ctx, e, entry.Name, in.errOut)
	done := "installed"
	if in.update != "" {
		done = "updated"
	}
	commands := strings.Join(entry.Commands, ", ")
	if commands == "" {
		commands = "none" // a remote MCP server runs nothing here
	}
	fmt.Fprintf(in.out, "%s %s %s (commands: %s; granted: %s)\n", done,
		entry.Name, entry.Version, commands, installedGrantText(e.ConfigDir, entry))
	return nil
}

// entryRef is an installed plugin as audit records name it.
func entryRef(en *plugin.Entry) *audit.PluginRef {
	return &audit.PluginRef{Name: en.Name, Version: en.Version, Source: en.Source, ManifestDigest: en.ManifestSHA256}
}

// refusedRef names the plugin a refused install was about, when the source is a local dir
// whose manifest still parses, so `audit show --plugin NAME` finds refusals too.
func refusedRef(source string) *audit.PluginRef {
	st, err := os.Stat(source)
	if err != nil || !st.IsDir() {
		return nil
	}
	man, _, err := plugin.LoadManifest(source)
	if err != nil || !plugin.ValidName(man.Plugin.Name) {
		return nil
	}
	return &audit.PluginRef{Name: man.Plugin.Name, Version: man.Plugin.Version, Source: source, ManifestDigest: man.SHA256()}
}

// installExit is the exit status of a refused install.
func installExit(err error) int {
	switch {
	// A plugin this fledge cannot run (ungranted capabilities under --ni, a newer protocol,
	// a server that does not start) is "could not run", like the same refusal at run time.
	case errors.Is(err, plugin.ErrNeedsGrant), errors.Is(err, plugin.ErrUnsupportedProtocol),
		errors.Is(err, plugin.ErrUnapprovedChange), errors.Is(err, ErrNotMCPServer), errors.Is(err, policy.ErrManaged):
		return ExitCannotRun
	case errors.Is(err, ui.ErrInterrupted): // Ctrl+C at a grant question
		return ExitInterrupted
	}
	return ExitFailure
}

func installReason(err error) string {
	switch {
	case errors.Is(err, plugin.ErrNeedsGrant), errors.Is(err, plugin.ErrUnapprovedChange):
		return string(reason.NonInteractive)
	case errors.Is(err, plugin.ErrUnsupportedProtocol):
		return string(reason.ProtocolVersionMismatch)
	case errors.Is(err, plugin.ErrNotDeclared):
		return string(reason.CapabilityNotDeclared)
	case errors.Is(err, policy.ErrManaged):
		return string(reason.CapabilityNotAllowed)
	case errors.Is(err, jsonrpc.ErrHandshake), errors.Is(err, jsonrpc.ErrManifest), errors.Is(err, ErrNotMCPServer):
		return string(reason.HandshakeFailed)
	}
	return string(reason.LaunchFailed)
}

// installedGrantText is the grants as users read them, saying when the filesystem level is
// the default rule rather than something the manifest declared.
func installedGrantText(configDir string, en *plugin.Entry) string {
	man, _, err := plugin.LoadManifest(plugin.Dir(configDir, en.Name))
	if err != nil || !man.FilesystemDefaulted() || en.Granted.FS() != policy.FilesystemDefault {
		return en.Granted.String()
	}
	return en.Granted.String() + " by default"
}

// hookRunner runs an install hook the user asked for (--run-hooks) as a confined exec whose
// only writable place is the staged plugin dir; hooks are plugin code like any other.
func (in *installer) hookRunner() plugin.HookRunner {
	e, out := in.h.Env, in.errOut
	return func(ctx context.Context, dir string, h plugin.Hook) error {
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		spec := e.Config.HookSpec(e.Paths(dir, dir, nil), os.Environ())
		spec.Kind, spec.Name, spec.Path, spec.Args = sandbox.KindExec, "install-hook", "/bin/sh", []string{"sh", "-c", h.Command}
		if h.Offline {
			spec.Network = false
		}
		rec := e.NewRecorder(in.log, nil, nil)
		var networkTo []string
		if len(h.NetworkTo) > 0 {
			// Only these destinations, by name, through fledge (an npm package's scripts:
			// the registry); each connection and lookup is recorded in the hook's session.
			if sess := e.Config.HookEgress(h.NetworkTo); sess != nil {
				spec.Network, spec.Egress = false, sess
				core.RecordNetwork(sess, rec)
				defer sess.Close()
				networkTo = h.NetworkTo
			}
		}
		// Hook output is plugin bytes: on a terminal, sanitised like every plugin's.
		hookOut, flush := pluginStream(out)
		defer flush()
		spec.Dir, spec.DirPath, spec.Stdout, spec.Stderr = d, dir, hookOut, hookOut
		details := map[string]any{"hook": h.Name, "command": h.Command, "cwd": dir, "network": spec.Network}
		if networkTo != nil {
			details["network_to"] = networkTo
		}
		sync, err := rec.BeforeAct(audit.EventExecDecision, details)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		spec.BeforeExec = sync
		rec.ObserveKernel(&spec, h.Command)
		proc, err := e.Sandbox.Start(ctx, &spec)
		if sync != nil {
			_ = sync()
		}
		if err != nil {
			return err
		}
		res, err := proc.Wait()
		// The hook's kernel refusals are on record before its outcome.
		rec.SettleKernel()
		if err != nil {
			return err
		}
		rc, decision := reason.OK, audit.Allow
		switch {
		case res.TimedOut:
			rc, decision = reason.Timeout, audit.Error
		case res.ExitCode != 0:
			rc, decision = reason.ToolError, audit.Error
		}
		// A nested repository the hook left where the user's git would run it was moved
		// aside when it ended (Linux): on record, and the user is told.
		for _, w := range rec.Quarantined(res.Quarantined) {
			_ = ui.HostLine(out, "fledge: "+w)
		}
		rec.Record(audit.EventExecOutcome, decision, rc,
			map[string]any{"hook": h.Name, "exit_code": res.ExitCode, "duration_ms": res.Duration.Milliseconds(),
				"git_quarantined": len(res.Quarantined)}, false)
		if res.ExitCode != 0 {
			return fmt.Errorf("hook %s exited with status %d", h.Name, res.ExitCode)
		}
		return nil
	}
}

// Removed is what one `plugins remove` did.
type Removed struct {
	*plugin.Entry
	// UnusedSecrets are stored secrets the plugin was granted that no installed plugin is
	// granted or declares now. fledge never deletes a stored secret unasked: they stay, and
	// the user is told (`fledge secrets remove NAME`).
	UnusedSecrets []string
}

// Remove removes an installed plugin and its data, and records it.
func (h *Host) Remove(name string) (*Removed, error) {
	log, err := h.auditLog()
	if err != nil {
		return nil, err
	}
	en, err := plugin.Remove(h.Env.ConfigDir, name)
	if err != nil {
		if errors.Is(err, plugin.ErrNotInstalled) {
			return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
		}
		return nil, exitErr(ExitFailure, "remove %s: %v", name, err)
	}
	_ = h.Env.NewRecorder(log, entryRef(en), nil).RecordNow(audit.EventRemove, audit.Allow, reason.OK, nil)
	if err := pins.Remove(h.Env.ConfigDir, en.Name); err != nil {
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the pinned tool definitions of %s stay: %v", en.Name, err))
	}
	if cur, prev, err := h.Env.PluginLogPaths(en.Name); err == nil {
		// Its stderr log goes with it: a plugin installed later under the name is another.
		for _, p := range []string{cur, prev} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the stderr log of %s stays: %v", en.Name, err))
			}
		}
	}
	return &Removed{Entry: en, UnusedSecrets: h.unusedSecrets(en.Granted.Secrets)}, nil
}

// unusedSecrets are the names among granted that are stored in fledge's secret store and
// that no installed plugin is granted or declares (in its approved plugin.toml).
func (h *Host) unusedSecrets(granted []string) []string {
	if len(granted) == 0 {
		return nil
	}
	stored, err := plugin.SecretNames(h.Env.StateDir)
	if err != nil || len(stored) == 0 {
		return nil
	}
	reg, err := plugin.LoadRegistry(h.Env.ConfigDir)
	if err != nil {
		return nil // nothing said rather than a wrong "unused"
	}
	used := map[string]bool{}
	for i := range reg.Plugins {
		en := &reg.Plugins[i]
		for _, n := range policy.SecretNames(en.Granted.Secrets) {
			used[n] = true
		}
		if m, err := plugin.ApprovedManifest(h.Env.ConfigDir, en); err == nil {
			for _, n := range policy.SecretNames(m.Declared().Secrets) {
				used[n] = true
			}
		}
	}
	var out []string
	for _, n := range policy.SecretNames(granted) {
		if slices.Contains(stored, n) && !used[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// GrantChange is what one `plugins grant` or `revoke` did.
type GrantChange struct {
	Plugin string
	Item   string
	// Changed is false when the plugin already held (or did not hold) the item.
	Changed bool
	// After is the grants now in force, as users read them.
	After string
	// Unrequested are items granted that the manifest does not declare.
	Unrequested []string
	// Dropped are the items a revoke took away, in Names spelling ("network" and each
	// "network=HOST:PORT" for a revoke of network).
	Dropped []string
}

// WholeNetwork reports whether a grant item is the whole network ("network",
// "network=true"): the strongest sandbox grant, which the CLI confirms on a terminal.
func WholeNetwork(item string) bool {
	g, err := policy.ParseGrantName(strings.ToLower(strings.TrimSpace(item)))
	return err == nil && g.Network
}

// WritesProject reports whether a grant item is filesystem=project-rw: the plugin process
// writes the project, which the CLI confirms on a terminal as it does the whole network.
func WritesProject(item string) bool {
	g, err := policy.ParseGrantName(strings.ToLower(strings.TrimSpace(item)))
	return err == nil && g.WritesProject()
}

// ChangeGrant grants (or, with revoke, takes back) one capability of an installed plugin,
// and records the change or the refusal.
func (h *Host) ChangeGrant(name, item string, revoke bool) (*GrantChange, error) {
	e := h.Env
	log, err := h.auditLog()
	if err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	if path, ok := policy.ExpandReadGrant(strings.TrimSpace(item), home); ok {
		return h.changeReadGrant(name, path, revoke)
	}
	verb, event := "grant", audit.EventGrant
	change := func(m *plugin.Manifest, cur policy.Grants) (policy.Change, error) {
		if policy.ClientCapability(item) && !plugin.SpeaksMCP(m.Plugin.Protocol) {
			return policy.Change{}, fmt.Errorf("%w: %s", policy.ErrClientCapability, strings.TrimSpace(item))
		}
		c, err := policy.GrantOne(cur, m.Declared(), m.Asked(), item)
		if err == nil {
			err = e.Config.Managed.CheckGrants(name, c.After, nil)
		}
		return c, err
	}
	if revoke {
		verb, event = "revoke", audit.EventRevoke
		change = func(_ *plugin.Manifest, cur policy.Grants) (policy.Change, error) {
			return policy.RevokeOne(cur, item)
		}
	}
	entry, c, err := plugin.ChangeGrants(e.ConfigDir, name, change)
	if err != nil {
		code, rc := ExitFailure, reason.LaunchFailed
		switch {
		case errors.Is(err, plugin.ErrNotInstalled):
			return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
		case errors.Is(err, policy.ErrGrantsNothing):
			code, rc = ExitUsage, reason.CapabilityNotDeclared
			if !revoke {
				err = fmt.Errorf("%s %w: `fledge plugins revoke %s network` takes the network away", strings.TrimSpace(item), policy.ErrGrantsNothing, name)
			}
		case errors.Is(err, policy.ErrUnknownCapability):
			code, rc = ExitUsage, reason.CapabilityNotDeclared
		case errors.Is(err, policy.ErrNotDeclared), errors.Is(err, plugin.ErrLegacyNoGrants):
			code, rc = ExitUsage, reason.CapabilityNotDeclared
		case errors.Is(err, plugin.ErrManifestChanged):
			code = ExitCannotRun
		case errors.Is(err, policy.ErrManaged):
			code, rc = ExitCannotRun, reason.CapabilityNotAllowed
		}
		_ = e.NewRecorder(log, refusedRefByName(e.ConfigDir, name), nil).RecordNow(event, audit.Deny, rc,
			map[string]any{audit.DetailCapability: item, "error": err.Error()})
		return nil, exitErr(code, "%s %s %s: %v", verb, name, item, err)
	}
	details := map[string]any{
		audit.DetailCapabilities: c.After.Names(), audit.DetailCapability: c.Item,
		"previous": c.Before.Names(), "changed": !c.Before.Equal(c.After),
	}
	unrequested := c.Unrequested
	if unrequested == nil {
		unrequested = []string{}
	}
	if !revoke {
		details["unrequested"] = unrequested
	}
	if err := e.NewRecorder(log, entryRef(entry), nil).RecordNow(event, audit.Allow, reason.OK, details); err != nil {
		// The registry already changed: say so rather than pretend it did not.
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the audit log could not record this %s: %v", verb, err))
	}
	var dropped []string
	for _, n := range c.Before.Names() {
		if !slices.Contains(c.After.Names(), n) {
			dropped = append(dropped, n)
		}
	}
	return &GrantChange{Plugin: entry.Name, Item: c.Item, Changed: !c.Before.Equal(c.After), After: c.After.String(),
		Unrequested: unrequested, Dropped: dropped}, nil
}

// refusedRefByName names the installed plugin a refused grant was about, when there is one.
func refusedRefByName(configDir, name string) *audit.PluginRef {
	reg, err := plugin.LoadRegistry(configDir)
	if err != nil {
		return nil
	}
	en := reg.Find(strings.TrimSpace(name))
	if en == nil {
		return nil
	}
	return entryRef(en)
}
