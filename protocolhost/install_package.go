// SPDX-License-Identifier: MIT

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
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// PackageRequest is what `plugins install npm:PKG` takes beyond the source: the version,
// the plugin's name, the entry point, the server's environment and arguments (after --),
// and what the written manifest declares.
type PackageRequest struct {
	Version, Name, Bin, Filesystem string
	Env                            []string
	Secrets                        []string // NAME or NAME@host:port (bound)
	Network                        bool
	ServerArgs                     []string
	// Force keeps the plugin when its server does not complete the MCP handshake at
	// install (default: the install is rolled back).
	Force bool
	// Python (pypi:) is the interpreter the server runs with, outside $HOME; AllowSdist
	// builds a package without a wheel from its sdist, confined.
	Python     string
	AllowSdist bool
	// Digest (oci: only) is the manifest digest the image must be, as a lock file gives
	// it: fetched by that digest; any other is refused (plugin.ErrDigestMismatch).
	Digest string
}

// ErrNotMCPServer: an npm package's server did not complete the MCP handshake (and list
// its tools) once installed; the install was rolled back.
var ErrNotMCPServer = errors.New("its server did not complete the MCP handshake")

// runPackage installs a plugin from a package source: npm:PKG is fetched with npm (no
// package code runs), its install scripts run as a confined install hook, and the written
// plugin (protocol = "mcp") is installed like any dir; then its tools are listed (the server
// starts confined, from its own dir). keep is the entry being updated, if any, and approved
// how the user asked for it (its entry's record; nil when there is none fledge can trust).
func (in *installer) runPackage(ctx context.Context, o *InstallRequest, base plugin.InstallOptions, keep *plugin.Entry, approved *plugin.NPMRequest) error {
	e := in.h.Env
	kind, pkg, version, err := plugin.ParsePackageSource(o.Source)
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	if kind == "pypi" {
		return in.runPyPI(ctx, o, base, keep, pkg, version)
	}
	if kind == "oci" || kind == "oci-archive" {
		return in.runImage(ctx, o, base, keep, nil)
	}
	if kind != "npm" {
		err := fmt.Errorf("%w: %s: sources need %s, which fledge does not drive yet (docs/protocols.md says what is missing); install the server into a dir with a plugin.toml instead",
			plugin.ErrSourceUnsupported, kind, map[string]string{"oci": "an OCI runtime"}[kind])
		_ = e.NewRecorder(in.log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.LaunchFailed, map[string]any{"source": o.Source, "error": err.Error()})
		return exitErr(ExitCannotRun, "%s: %v", in.what(o.Source), err)
	}
	return in.runNPM(ctx, o, base, keep, approved, pkg, version)
}

// runNPM installs (or, with keep, updates) an npm: package: fetched with the user's npm, no
// package code run by the fetch, its install scripts run confined in the staged copy.
func (in *installer) runNPM(ctx context.Context, o *InstallRequest, base plugin.InstallOptions, keep *plugin.Entry, approved *plugin.NPMRequest, pkg, version string) error {
	e := in.h.Env
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
		Bin: p.Bin, Filesystem: p.Filesystem, Network: p.Network, Secrets: p.Secrets}
	if keep == nil {
		// What the written manifest will declare is known now: nobody to ask (and no --yes
		// or --grant) refuses before the download, not after it.
		if err := plugin.DecideBeforeFetch(base, req); err != nil {
			src := plugin.SourceNPM + pkg
			_ = e.NewRecorder(in.log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.Code(installReason(err)),
				map[string]any{"source": src, "error": err.Error()})
			return exitErr(installExit(err), "install %s: %v", src, err)
		}
	}
	// Fetched next to the plugins (same file system) and removed whatever happens: Install
	// copies it into its own staging dir and renames that into place, so a failure at any
	// step leaves nothing installed.
	tmp, err := fetchDir(e.ConfigDir, ".fetch-npm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
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
		return exitErr(code, "%s: %v", in.what(o.Source), err)
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
		if err := in.approveRequest(keep.Name, approved, &pk.Request, base); err != nil {
			rc := reason.NonInteractive
			if errors.Is(err, errDeclined) {
				rc = reason.Cancelled
			}
			_ = e.NewRecorder(in.log, entryRef(keep), nil).RecordNow(audit.EventInstall, audit.Deny, rc,
				map[string]any{"source": o.Source, "error": err.Error()})
			return exitErr(ExitCannotRun, "update %s: %v", keep.Name, err)
		}
		base.KeepGrants = &keep.Granted
		base.PreviousAsked = plugin.ApprovedAsked(e.ConfigDir, keep)
	}
	// How the user asked for it goes into its entry in plugins.toml, out of reach of the
	// install scripts about to run in the staged dir.
	rec := pk.Request
	base.NPM = &rec
	var listed []tools.Tool
	base.Verify = in.verifyServer(keep != nil, p.Force, &listed)
	if in.sync != nil {
		base.Verify = in.syncVerify(&listed)
	}
	if err := in.installOne(ctx, base); err != nil {
		return err
	}
	if listed != nil {
		in.showTools(pk.Name, listed)
	}
	return nil
}

// verifyServer is the check an npm plugin passes before its install is kept: its server,
// started confined from the plugin dir now in place, completes the MCP handshake and lists
// its tools (into *listed). Otherwise the install is rolled back (the pins the listing took
// with it), unless force keeps it with a warning.
func (in *installer) verifyServer(update, force bool, listed *[]tools.Tool) func(context.Context, *plugin.Entry) error {
	e := in.h.Env
	return func(ctx context.Context, en *plugin.Entry) error {
		before, perr := pins.Load(e.ConfigDir, en.Name)
		list, err := in.pluginTools(ctx, en.Name)
		if err == nil {
			*listed = list
			return nil
		}
		if force {
			_ = ui.HostLine(in.errOut, fmt.Sprintf("fledge: warning: %v (%v); %s kept because of --force ('fledge plugins remove %s' undoes the install)",
				ErrNotMCPServer, err, en.Name, en.Name))
			return nil
		}
		if before != nil && perr == nil {
			_ = pins.Save(e.ConfigDir, before)
		} else {
			_ = pins.Remove(e.ConfigDir, en.Name)
		}
		undone := "nothing was installed (--force keeps it)"
		if update {
			undone = en.Name + " stays as it was (--force keeps the new version)"
		}
		return fmt.Errorf("%w (%v); %s; see 'fledge audit show --plugin %s'", ErrNotMCPServer, err, undone, en.Name)
	}
}

// errDeclined: the user said no to an update's changes.
var errDeclined = errors.New("update declined")

// approveRequest has the user approve an update that would run the server of an npm plugin
// differently from how they asked for it (approved): other arguments or environment (a new
// version's server.json may bring some), another version, entry point or capability. A nil
// approved is a record an older fledge kept in the plugin dir, where install scripts could
// rewrite it: everything is shown and confirmed once. Nobody to ask (--yes, --ni): refused.
func (in *installer) approveRequest(name string, approved, next *plugin.NPMRequest, base plugin.InstallOptions) error {
	return in.approveChanges(name, approved == nil, next.Changes(approved), base)
}

// approveChanges has the user approve changes (approveRequest); untrusted says the record
// they are measured against could not be trusted (everything is listed).
func (in *installer) approveChanges(name string, untrusted bool, changes []string, base plugin.InstallOptions) error {
	if len(changes) == 0 {
		return nil
	}
	head := fmt.Sprintf("Updating %s would run its server differently from how you asked for it:", name)
	if untrusted {
		head = fmt.Sprintf("How %s was asked for was kept by an older fledge inside its plugin dir, where the package's install scripts can rewrite it; confirm it once (fledge keeps it in plugins.toml from now on):", name)
	}
	_ = ui.HostLine(in.errOut, head)
	for _, c := range changes {
		_ = ui.HostLine(in.errOut, "  "+c)
	}
	if base.Yes || base.NonInteractive || base.Asker == nil {
		return fmt.Errorf("%w: %s; an update with --yes or without a terminal changes nothing you did not approve: run `fledge plugins update %s` on a terminal to review it, or remove and install it again",
			plugin.ErrUnapprovedChange, strings.Join(changes, "; "), name)
	}
	ok, err := base.Asker.Confirm(fmt.Sprintf("Update %s with these?", name), false)
	if err != nil {
		return fmt.Errorf("update cancelled: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: %s stays as it was", errDeclined, name)
	}
	return nil
}

// pluginTools starts a freshly installed server (confined, from its own dir) and lists its
// tools: proof that it runs with nothing outside its dir, and the user's first look at
// what it offers.
func (in *installer) pluginTools(ctx context.Context, name string) ([]tools.Tool, error) {
	ts, err := in.h.OpenTools()
	if err != nil {
		return nil, err
	}
	defer ts.Close()
	return ts.Catalogue.PluginTools(ctx, name)
}

func (in *installer) showTools(name string, list []tools.Tool) {
	fmt.Fprintf(in.out, "%s offers %d tools:\n", name, len(list))
	for _, t := range list {
		_ = ui.HostLine(in.out, fmt.Sprintf("  %s  %s", t.Name, firstLine(t.Description, 100)))
	}
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
	// Yes answers nothing: an update keeps the grants when the new version asks for no more
	// than before, and refuses (ErrUnapprovedChange) when it asks for more or would run
	// differently; only a terminal, or Grant, decides on more.
	Yes bool
	// Grant, when GrantSet, is --grant: exactly these capabilities, when the new version
	// asks for more than before.
	Grant          string
	GrantSet       bool
	Asker          plugin.Asker
	NonInteractive bool
	// Force keeps a new version of an npm plugin whose server does not complete the MCP
	// handshake (default: the update is undone).
	Force bool
}

// Update fetches an installed plugin again from where it came from (npm:PKG the way it was
// asked for, recorded in plugins.toml; a git URL; a dir), installs it in place, and keeps
// its grants when the new manifest asks for no more than the approved one. Anything beyond
// what the user decided on before is asked on a terminal, or refused.
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
	if old.Protocol == plugin.ProtocolMCPRemote {
		// Its URL is not a source to fetch (git would be asked for it): what it serves is
		// listed, and checked against its pins, at every connection.
		if h.opts.Streams.Out == nil {
			return nil
		}
		fmt.Fprintf(h.opts.Streams.Out, "%s is a remote MCP server: nothing to fetch (its tools are checked against their pins at each connection; 'fledge plugins review %s' shows a change)\n", old.Name, old.Name)
		return nil
	}
	log, err := h.auditLog()
	if err != nil {
		return err
	}
	in := &installer{h: h, log: log, out: h.opts.Streams.Out, errOut: h.stderr(), update: old.Name}
	base := plugin.InstallOptions{ConfigDir: e.ConfigDir, Source: old.Source, Yes: o.Yes, NonInteractive: o.NonInteractive,
		Asker: o.Asker, Out: h.stderr(), Managed: e.Config.Managed}
	if err := in.checkSource(old.Source); err != nil {
		return err
	}
	if o.GrantSet {
		gr, err := policy.ParseGrantList(o.Grant)
		if err != nil {
			return exitErr(ExitUsage, "--grant: %v", err)
		}
		base.Grant = &gr
	}
	base.RunHook = in.hookRunner()
	base.Handshake = in.handshakeHook(nil)
	base.KeepGrants = &old.Granted
	// What the user decided on: the approved manifest, never one changed since.
	base.PreviousAsked = plugin.ApprovedAsked(e.ConfigDir, &old)
	// The user asked for the new version: its tool definitions are pinned afresh at its
	// first listing (an npm package's install lists them at once). An update refused or
	// undone leaves the old version, and its pins go back with it.
	oldPins, err := pins.Load(e.ConfigDir, o.Name)
	if err != nil {
		return exitErr(ExitCannotRun, "update %s: %v", o.Name, err)
	}
	if err := pins.Remove(e.ConfigDir, o.Name); err != nil {
		return exitErr(ExitCannotRun, "update %s: %v", o.Name, err)
	}
	if err := h.update(ctx, in, base, &old, o); err != nil {
		if oldPins != nil {
			if perr := pins.Save(e.ConfigDir, oldPins); perr != nil {
				_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the pinned tool definitions of %s could not be restored (they are taken afresh at its next listing): %v", o.Name, perr))
			}
		}
		return err
	}
	return nil
}

func (h *Host) update(ctx context.Context, in *installer, base plugin.InstallOptions, old *plugin.Entry, o UpdateRequest) error {
	if !plugin.IsPackageSource(old.Source) {
		return in.installOne(ctx, base)
	}
	if strings.HasPrefix(old.Source, plugin.SourcePyPI) {
		req, err := pypiRecord(old)
		if err != nil {
			return exitErr(ExitCannotRun, "update %s: %v; install it again", o.Name, err)
		}
		// Re-resolved: the version asked for (latest when none), wheels pinned afresh.
		ir := &InstallRequest{Source: old.Source, Yes: o.Yes, Package: PackageRequest{Version: req.Version, Name: o.Name,
			Bin: req.Bin, Env: req.Env, Network: req.Network, Filesystem: req.Filesystem, ServerArgs: req.Args,
			Secrets: req.Secrets, Force: o.Force, Python: req.Python, AllowSdist: req.AllowSdist}}
		_, pkg, _, _ := plugin.ParsePackageSource(old.Source)
		return in.runPyPI(ctx, ir, base, old, pkg, "")
	}
	if isImageSource(old.Source) {
		return h.updateImage(ctx, in, base, old, o)
	}
	req, approved, err := npmRecord(h.Env.ConfigDir, old)
	if err != nil {
		return exitErr(ExitCannotRun, "update %s: %v; install it again", o.Name, err)
	}
	ir := &InstallRequest{Source: old.Source, Yes: o.Yes, Package: PackageRequest{Version: req.Version, Name: o.Name,
		Bin: req.Bin, Env: req.Env, Network: req.Network, Filesystem: req.Filesystem, ServerArgs: req.Args, Secrets: req.Secrets, Force: o.Force}}
	return in.runPackage(ctx, ir, base, old, approved)
}

// npmRecord is how the npm plugin of en was asked for: the record in its entry (approved,
// as the user gave it), else, for an install by an older fledge, the file that fledge kept
// in the plugin dir (approved nil: its install scripts could have rewritten it). From that
// file only the version, entry point, arguments and environment are taken, for the user to
// confirm; the package is the entry's source and the capabilities are the approved
// manifest's.
func npmRecord(configDir string, en *plugin.Entry) (req *plugin.NPMRequest, approved *plugin.NPMRequest, err error) {
	_, pkg, _, err := plugin.ParsePackageSource(en.Source)
	if err != nil {
		return nil, nil, err
	}
	if en.NPM != nil {
		r := *en.NPM
		if r.Package != pkg {
			return nil, nil, fmt.Errorf("plugins.toml records package %q for source %s", r.Package, en.Source)
		}
		if err := r.Check(); err != nil {
			return nil, nil, fmt.Errorf("how it was installed (plugins.toml): %w", err)
		}
		return &r, en.NPM, nil
	}
	r, err := plugin.ReadLegacyNPMRequest(configDir, en.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("how it was installed is unreadable (%v)", err)
	}
	m, err := plugin.ApprovedManifest(configDir, en)
	if err != nil {
		return nil, nil, err
	}
	r.Package, r.Name = pkg, en.Name
	r.Filesystem, r.Network, r.Secrets = m.Capabilities.Filesystem, m.Capabilities.Network.All, m.Capabilities.Secrets
	return r, nil, nil
}

// fetchDir makes the directory a package is fetched into, beside the plugins (so the staged
// copy is renamed into place on the same filesystem); the caller removes it.
func fetchDir(configDir, prefix string) (string, error) {
	pluginsDir := filepath.Join(configDir, "plugins")
	if err := os.MkdirAll(pluginsDir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(pluginsDir, prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}
