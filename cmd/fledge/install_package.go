package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/tools"
	"github.com/fledgehq/fledge/ui"
)

// packageFlags are `plugins install npm:PKG`'s own flags; ServerArgs come after `--`.
type packageFlags struct {
	Version, Name, Bin, Filesystem string
	Env                            []string
	Network                        bool
	ServerArgs                     []string
}

func addPackageFlags(c *cobra.Command, o *InstallOptions) {
	c.Flags().StringVar(&o.Pkg.Version, "version", "", "npm:PKG: the version, range or tag to install (default latest)")
	c.Flags().StringVar(&o.Pkg.Name, "name", "", "npm:PKG: the plugin name (default: the package name without its scope)")
	c.Flags().StringVar(&o.Pkg.Bin, "bin", "", "npm:PKG: which entry point, when the package has several")
	c.Flags().StringArrayVar(&o.Pkg.Env, "env", nil, "npm:PKG: NAME=VALUE for the server (${FLEDGE_DATA_DIR}, ${FLEDGE_PROJECT_ROOT} expand when it starts)")
	c.Flags().BoolVar(&o.Pkg.Network, "network", false, "npm:PKG: the server asks for the network (granted only as you decide)")
	c.Flags().StringVar(&o.Pkg.Filesystem, "filesystem", "", "npm:PKG: the filesystem level the server asks for: none, plugin or project (default project)")
}

// runPackage installs a plugin from a package source: npm:PKG is fetched with npm (no
// package code runs), its install scripts run as a confined install hook, and the written
// plugin (protocol = "mcp") is installed like any dir; then its tools are listed (the server
// starts confined, from its own dir) and pinned.
func (o *InstallOptions) runPackage(ctx context.Context, e *env, log *audit.Log, base plugin.InstallOptions, keep *plugin.Entry) error {
	kind, pkg, version, err := plugin.ParsePackageSource(o.Source)
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	if kind != "npm" {
		err := fmt.Errorf("%w: %s: sources: installs from %s need %s, which fledge does not drive yet (see docs/protocols.md); install the server into a dir with a plugin.toml instead",
			plugin.ErrSourceUnsupported, kind, kind, map[string]string{"pypi": "uvx", "oci": "an OCI runtime"}[kind])
		_ = e.NewRecorder(log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.LaunchFailed, map[string]any{"source": o.Source, "error": err.Error()})
		return exitErr(ExitCannotRun, "install %s: %v", o.Source, err)
	}
	if version != "" && o.Pkg.Version != "" {
		return exitErr(ExitUsage, "install %s: give the version once (in the source or with --version)", o.Source)
	}
	if o.Pkg.Version != "" {
		version = o.Pkg.Version
	}
	req := plugin.NPMRequest{Package: pkg, Version: version, Args: o.Pkg.ServerArgs, Env: o.Pkg.Env, Name: o.Pkg.Name,
		Bin: o.Pkg.Bin, Filesystem: o.Pkg.Filesystem, Network: o.Pkg.Network}
	pluginsDir := filepath.Join(e.configDir, "plugins")
	if err := os.MkdirAll(pluginsDir, 0o700); err != nil {
		return err
	}
	// Fetched next to the plugins (same file system), removed whatever happens: Install
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
	fmt.Fprintf(o.g.Streams.Err, "Fetching npm package %s with npm (no package code runs in this step)...\n", pkg)
	pk, err := plugin.FetchNPM(ctx, plugin.NPMOptions{Request: req, Dir: tmp})
	if err != nil {
		_ = e.NewRecorder(log, nil, nil).RecordNow(audit.EventInstall, audit.Deny, reason.LaunchFailed,
			map[string]any{"source": o.Source, "error": err.Error()})
		code := ExitFailure
		if errors.Is(err, plugin.ErrNoNPM) {
			code = ExitCannotRun
		}
		if errors.Is(err, plugin.ErrBadSource) {
			code = ExitUsage
		}
		return exitErr(code, "install %s: %v", o.Source, err)
	}
	fmt.Fprintf(o.g.Streams.Err, "Fetched %s@%s (entry point %s); the lock file pins every dependency.\n", pkg, pk.Version, pk.Entry)
	if len(pk.Scripts) > 0 {
		fmt.Fprintf(o.g.Streams.Err, "These packages have install scripts; they run confined (the staged plugin dir only: no project, no home):\n")
		for _, s := range pk.Scripts {
			fmt.Fprintf(o.g.Streams.Err, "  %s\n", s)
		}
	}
	base.Source = tmp
	base.RecordSource = plugin.SourceNPM + pkg
	base.RunHooks = true
	if keep != nil {
		base.KeepGrants = &keep.Granted
		if m, _, err := plugin.LoadManifest(plugin.Dir(e.configDir, keep.Name)); err == nil {
			base.PreviousAsked = m.Asked()
		}
	}
	if err := o.installOne(ctx, e, log, base); err != nil {
		return err
	}
	return listInstalledTools(ctx, o.g, e, pk.Name)
}

// listInstalledTools starts the freshly installed server (confined, from its own dir) and
// lists its tools: proof that it runs with nothing outside its dir, and the first look the
// user gets at what it offers.
func listInstalledTools(ctx context.Context, g *Globals, e *env, name string) error {
	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		return err
	}
	cwd, _ := os.Getwd()
	proj, _ := project.Detect(cwd, g.Project)
	stderr, flush := pluginStderr(g.Streams.Err)
	defer flush()
	cat := tools.NewCatalogue(&tools.Host{Env: e.Env, Project: proj, Stderr: stderr}, reg)
	defer cat.Close()
	b, err := cat.Binding(name)
	if err != nil {
		return exitErr(ExitCannotRun, "installed %s, but it cannot start: %v", name, err)
	}
	p := cat.Provider(b.Manifest.Plugin.Protocol)
	if p == nil {
		return nil
	}
	ts, err := p.Tools(ctx, b)
	if err != nil {
		return exitErr(ExitCannotRun, "installed %s, but its server did not list its tools: %v (see 'fledge audit show --plugin %s'; 'fledge plugins remove %s' undoes the install)", name, err, name, name)
	}
	fmt.Fprintf(g.Streams.Out, "%s offers %d tools:\n", name, len(ts))
	for _, t := range ts {
		_ = ui.HostLine(g.Streams.Out, fmt.Sprintf("  %s  %s", t.Name, firstLine(t.Description, 100)))
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

// UpdateOptions is `fledge plugins update`.
type UpdateOptions struct {
	g   *Globals
	Yes bool
}

func newUpdateCmd(g *Globals) *cobra.Command {
	o := &UpdateOptions{g: g}
	c := &cobra.Command{
		Use:   "update <name>",
		Short: "Fetch an installed plugin again from its source, keeping grants it does not outgrow",
		Long: `Fetch an installed plugin again from where it came from (npm:PKG at the version range
it was installed with, a git URL, a dir), install it in place, and keep its grants when the
new manifest asks for no more than the old one; when it asks for more, the grants are
decided again as at install (--yes grants what it declares). state.json and data/ stay.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.Run(cmd.Context(), args[0]) },
	}
	c.Flags().BoolVarP(&o.Yes, "yes", "y", false, "if the new version asks for more, grant everything it declares")
	return c
}

func (o *UpdateOptions) Run(ctx context.Context, name string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	defer e.close()
	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	en := reg.Find(name)
	if en == nil {
		return exitErr(ExitFailure, "no plugin named %q is installed", name)
	}
	old := *en
	log, err := e.openAudit()
	if err != nil {
		return err
	}
	u := ui.New(ui.Options{In: o.g.Streams.In, Out: o.g.Streams.Out, Err: o.g.Streams.Err, NonInteractive: o.g.nonInteractive()})
	defer u.Close()
	io := plugin.InstallOptions{ConfigDir: e.configDir, Source: old.Source, Yes: o.Yes, NonInteractive: !u.Interactive(),
		Asker: uiAsker{u}, Out: o.g.Streams.Err, RunHook: hookRunner(e, log, o.g.Streams.Err)}
	io.Handshake = handshakeHook(e, o.g.Streams.Err, nil)
	io.KeepGrants = &old.Granted
	if m, _, err := plugin.LoadManifest(plugin.Dir(e.configDir, name)); err == nil {
		io.PreviousAsked = m.Asked()
	}
	if plugin.IsPackageSource(old.Source) {
		req, err := plugin.ReadNPMRequest(e.configDir, name)
		if err != nil {
			return exitErr(ExitCannotRun, "update %s: how it was installed is unreadable (%v); install it again", name, err)
		}
		io2 := &InstallOptions{g: o.g, Source: old.Source, Yes: o.Yes, Pkg: packageFlags{Version: req.Version, Name: req.Name,
			Bin: req.Bin, Env: req.Env, Network: req.Network, Filesystem: req.Filesystem, ServerArgs: req.Args}}
		if req.Name == "" {
			io2.Pkg.Name = name
		}
		return io2.runPackage(ctx, e, log, io, &old)
	}
	i := &InstallOptions{g: o.g, Source: old.Source}
	return i.installOne(ctx, e, log, io)
}
