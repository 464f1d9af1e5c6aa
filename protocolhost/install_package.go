package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// PackageRequest is what `plugins install npm:PKG` takes beyond the source: the version,
// the plugin's name, the entry point, the server's environment and arguments (after --),
// and what the written manifest declares.
type PackageRequest struct {
	Version, Name, Bin, Filesystem string
	Env                            []string
	Network                        bool
	ServerArgs                     []string
}

// runPackage installs a plugin from a package source: npm:PKG is fetched with npm (no
// package code runs), its install scripts run as a confined install hook, and the written
// plugin (protocol = "mcp") is installed like any dir; then its tools are listed (the server
// starts confined, from its own dir). keep is the entry being updated, if any.
func (in *installer) runPackage(ctx context.Context, o *InstallRequest, base plugin.InstallOptions, keep *plugin.Entry) error {
	e := in.h.Env
	kind, pkg, version, err := plugin.ParsePackageSource(o.Source)
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	if kind != "npm" {
		err := fmt.Errorf("%w: %s: sources need %s, which fledge does not drive yet (docs/protocols.md says what is missing); install the server into a dir with a plugin.toml instead",
			plugin.ErrSourceUnsupported, kind, map[string]string{"pypi": "uvx", "oci": "an OCI runtime"}[kind])
		_ = e.NewRecorder(in.log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.LaunchFailed, map[string]any{"source": o.Source, "error": err.Error()})
		return exitErr(ExitCannotRun, "install %s: %v", o.Source, err)
	}
	p := o.Package
	if version != "" && p.Version != "" {
		return exitErr(ExitUsage, "install %s: give the version once (in the source or with --version)", o.Source)
	}
	if p.Version != "" {
		version = p.Version
	}
	if rest, ok := strings.CutPrefix(version, "file:"); ok && !filepath.IsAbs(rest) {
		if abs, err := filepath.Abs(rest); err == nil {
			version = "file:" + abs
		}
	}
	req := plugin.NPMRequest{Package: pkg, Version: version, Args: p.ServerArgs, Env: p.Env, Name: p.Name,
		Bin: p.Bin, Filesystem: p.Filesystem, Network: p.Network}
	pluginsDir := filepath.Join(e.ConfigDir, "plugins")
	if err := os.MkdirAll(pluginsDir, 0o700); err != nil {
		return err
	}
	// Fetched next to the plugins (same file system) and removed whatever happens: Install
	// copies it into its own staging dir and renames that into place, so a failure at any
	// step leaves nothing installed.
	tmp, err := os.MkdirTemp(pluginsDir, ".fetch-npm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(in.errOut, "Fetching npm package %s with npm (no package code runs in this step)...\n", pkg)
	pk, err := plugin.FetchNPM(ctx, plugin.NPMOptions{Request: req, Dir: tmp})
	if err != nil {
		_ = e.NewRecorder(in.log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.LaunchFailed,
			map[string]any{"source": o.Source, "error": err.Error()})
		code := ExitFailure
		switch {
		case errors.Is(err, plugin.ErrNoNPM):
			code = ExitCannotRun
		case errors.Is(err, plugin.ErrBadSource):
			code = ExitUsage
		}
		return exitErr(code, "install %s: %v", o.Source, err)
	}
	fmt.Fprintf(in.errOut, "Fetched %s@%s (entry point %s); package-lock.json pins every dependency.\n", pkg, pk.Version, pk.Entry)
	if len(pk.Scripts) > 0 {
		reach := "no network"
		if pk.Registry != "" {
			reach = "network only to " + pk.Registry
		}
		fmt.Fprintf(in.errOut, "These packages have install scripts; they run confined (in the staged plugin dir only: no project, no home, %s):\n", reach)
		for _, s := range pk.Scripts {
			_ = ui.HostLine(in.errOut, "  "+s)
		}
	}
	base.Source = tmp
	base.RecordSource = plugin.SourceNPM + pkg
	base.RunHooks = true
	base.HooksOffline = true
	if pk.Registry != "" {
		// The scripts reach the registry npm fetched from, by name, and nothing else.
		base.HooksNetworkTo = []string{pk.Registry}
	}
	base.Handshake = nil
	if keep != nil {
		base.KeepGrants = &keep.Granted
		if m, _, err := plugin.LoadManifest(plugin.Dir(e.ConfigDir, keep.Name)); err == nil {
			base.PreviousAsked = m.Asked()
		}
	}
	if err := in.installOne(ctx, base); err != nil {
		return err
	}
	return in.listTools(ctx, pk.Name)
}

// listTools starts a freshly installed server (confined, from its own dir) and lists its
// tools: proof that it runs with nothing outside its dir, and the user's first look at
// what it offers.
func (in *installer) listTools(ctx context.Context, name string) error {
	ts, err := in.h.OpenTools()
	if err != nil {
		return err
	}
	defer ts.Close()
	list, err := ts.Catalogue.PluginTools(ctx, name)
	if err != nil {
		return exitErr(ExitCannotRun, "installed %s, but its server did not list its tools: %v (see 'fledge audit show --plugin %s'; 'fledge plugins remove %s' undoes the install)", name, err, name, name)
	}
	fmt.Fprintf(in.out, "%s offers %d tools:\n", name, len(list))
	for _, t := range list {
		_ = ui.HostLine(in.out, fmt.Sprintf("  %s  %s", t.Name, firstLine(t.Description, 100)))
	}
	return nil
}

func firstLine(s string, max int) string {
	for i, r := range s {
		if r == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// UpdateRequest is one `fledge plugins update`.
type UpdateRequest struct {
	Name string
	// Yes grants everything the new manifest declares when it asks for more than before.
	Yes            bool
	Asker          plugin.Asker
	NonInteractive bool
}

// Update fetches an installed plugin again from where it came from (npm:PKG at the version
// range it was installed with, a git URL, a dir), installs it in place, and keeps its grants
// when the new manifest asks for no more than the old one.
func (h *Host) Update(ctx context.Context, o UpdateRequest) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e := h.Env
	reg, err := h.registry()
	if err != nil {
		return err
	}
	en := reg.Find(o.Name)
	if en == nil {
		return exitErr(ExitFailure, "no plugin named %q is installed", o.Name)
	}
	old := *en
	log, err := h.auditLog()
	if err != nil {
		return err
	}
	in := &installer{h: h, log: log, out: h.opts.Streams.Out, errOut: h.stderr()}
	base := plugin.InstallOptions{ConfigDir: e.ConfigDir, Source: old.Source, Yes: o.Yes, NonInteractive: o.NonInteractive,
		Asker: o.Asker, Out: h.stderr()}
	base.RunHook = in.hookRunner()
	base.Handshake = in.handshakeHook(nil)
	base.KeepGrants = &old.Granted
	if m, _, err := plugin.LoadManifest(plugin.Dir(e.ConfigDir, o.Name)); err == nil {
		base.PreviousAsked = m.Asked()
	}
	// The user asked for the new version: its tool definitions are pinned afresh at its
	// first listing (an npm package's install lists them at once).
	if err := pins.Remove(e.ConfigDir, o.Name); err != nil {
		return exitErr(ExitCannotRun, "update %s: %v", o.Name, err)
	}
	if !plugin.IsPackageSource(old.Source) {
		return in.installOne(ctx, base)
	}
	req, err := plugin.ReadNPMRequest(e.ConfigDir, o.Name)
	if err != nil {
		return exitErr(ExitCannotRun, "update %s: how it was installed is unreadable (%v); install it again", o.Name, err)
	}
	ir := &InstallRequest{Source: old.Source, Yes: o.Yes, Package: PackageRequest{Version: req.Version, Name: o.Name,
		Bin: req.Bin, Env: req.Env, Network: req.Network, Filesystem: req.Filesystem, ServerArgs: req.Args}}
	return in.runPackage(ctx, ir, base, &old)
}
