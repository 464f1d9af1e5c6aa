package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/jsonrpchost"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
	"github.com/spf13/cobra"
)

func newPluginsCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "plugins",
		Short: "Install, list, inspect and remove plugins",
	}
	c.AddCommand(newInstallCmd(g), newListCmd(g), newInfoCmd(g), newGrantCmd(g), newRevokeCmd(g), newRemoveCmd(g), newUpdateCmd(g), newNewCmd(g))
	return c
}

// InstallOptions is `fledge plugins install`.
type InstallOptions struct {
	g        *Globals
	Source   string
	Yes      bool
	Grant    string
	GrantSet bool
	RunHooks bool
	// Protocol and FromDir install self-describing plugins (install_jsonrpc.go).
	Protocol string
	FromDir  string
	// Pkg are the flags of a package source (npm:PKG; install_package.go).
	Pkg packageFlags
}

// uiAsker asks install questions on the terminal.
type uiAsker struct{ u ui.UI }

func (a uiAsker) Confirm(question string, def bool) (bool, error) {
	return a.u.Confirm(context.Background(), "install", question, &def)
}

func newInstallCmd(g *Globals) *cobra.Command {
	o := &InstallOptions{g: g}
	c := &cobra.Command{
		Use:   "install <dir|git-url> | npm:PKG [--version V] [-- ARGS...] | <executable> --protocol P | --from-dir DIR --protocol P",
		Short: "Install a plugin, granting only the capabilities you approve",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				args, o.Pkg.ServerArgs = args[:dash], args[dash:]
				if len(args) != 1 || !plugin.IsPackageSource(args[0]) {
					return exitErr(ExitUsage, "arguments after -- are a package server's (npm:PKG -- ARGS...)")
				}
			}
			if len(args) > 1 {
				return exitErr(ExitUsage, "install takes one source (a dir, git URL, npm:PKG or executable)")
			}
			if (len(args) == 1) == (o.FromDir != "") {
				return exitErr(ExitUsage, "install takes one source (a dir, git URL or executable) or --from-dir DIR (see 'fledge plugins install --help')")
			}
			if len(args) == 1 {
				o.Source = args[0]
			}
			o.GrantSet = cmd.Flags().Changed("grant")
			return o.Run(cmd.Context())
		},
	}
	addSelfDescribingFlags(c, o)
	addPackageFlags(c, o)
	c.Flags().BoolVarP(&o.Yes, "yes", "y", false, "grant every capability the manifest declares")
	c.Flags().StringVar(&o.Grant, "grant", "", "grant only these capabilities: exec,store,metadata,network,filesystem[=project|plugin]")
	c.Flags().BoolVar(&o.RunHooks, "run-hooks", false, "run the plugin's build hooks (shown first)")
	return c
}

func (o *InstallOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	defer e.close()
	u := ui.New(ui.Options{In: o.g.Streams.In, Out: o.g.Streams.Out, Err: o.g.Streams.Err, NonInteractive: o.g.nonInteractive()})
	defer u.Close()
	io := plugin.InstallOptions{
		ConfigDir:      e.configDir,
		Source:         o.Source,
		Yes:            o.Yes,
		NonInteractive: !u.Interactive(),
		RunHooks:       o.RunHooks,
		Asker:          uiAsker{u},
		Out:            o.g.Streams.Err,
	}
	if o.GrantSet {
		gr, err := policy.ParseGrantList(o.Grant)
		if err != nil {
			return exitErr(ExitUsage, "--grant: %v", err)
		}
		io.Grant = &gr
	}
	log, err := e.openAudit()
	if err != nil {
		return err
	}
	io.RunHook = hookRunner(e, log, o.g.Streams.Err)
	if plugin.IsPackageSource(o.Source) {
		return o.runPackage(ctx, e, log, io, nil)
	}
	if o.Protocol != "" || o.FromDir != "" {
		return o.runSelfDescribing(ctx, e, log, io)
	}
	io.Handshake = handshakeHook(e, o.g.Streams.Err, nil)
	return o.installOne(ctx, e, log, io)
}

// installOne runs one install and records it.
func (o *InstallOptions) installOne(ctx context.Context, e *env, log *audit.Log, io plugin.InstallOptions) error {
	entry, err := plugin.Install(ctx, io)
	// One install is one session: its records share an id and say what the sandbox enforces.
	if err != nil {
		_ = e.NewRecorder(log, refusedRef(io.Source), nil).RecordNow(audit.EventInstall, audit.Deny, reason.Code(installReason(err)),
			map[string]any{"source": io.Source, "error": err.Error()})
		code := ExitFailure
		// A plugin this fledge cannot run (ungranted capabilities under --ni, a newer
		// protocol) is "could not run", like the same refusal at run time.
		if errors.Is(err, plugin.ErrNeedsGrant) || errors.Is(err, plugin.ErrUnsupportedProtocol) {
			code = ExitCannotRun
		}
		if errors.Is(err, ui.ErrInterrupted) { // Ctrl+C at a grant question
			code = ExitInterrupted
		}
		src := io.Source
		if io.RecordSource != "" {
			src = io.RecordSource
		}
		return exitErr(code, "install %s: %v", src, err)
	}
	ref := &audit.PluginRef{Name: entry.Name, Version: entry.Version, Source: entry.Source, ManifestDigest: entry.ManifestSHA256}
	rec := e.NewRecorder(log, ref, nil)
	_ = rec.RecordNow(audit.EventInstall, audit.Allow, reason.OK, map[string]any{"source": entry.Source, "commands": entry.Commands})
	_ = rec.RecordNow(audit.EventGrant, audit.Allow, reason.OK, map[string]any{audit.DetailCapabilities: entry.Granted.Names()})
	precompileWasm(ctx, e, entry.Name, o.g.Streams.Err)
	fmt.Fprintf(o.g.Streams.Out, "installed %s %s (commands: %s; granted: %s)\n",
		entry.Name, entry.Version, strings.Join(entry.Commands, ", "), installedGrantText(e.configDir, entry))
	return nil
}

// sandboxInfo is the sandbox part of an audit record.
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

func installReason(err error) string {
	switch {
	case errors.Is(err, plugin.ErrNeedsGrant):
		return string(reason.NonInteractive)
	case errors.Is(err, plugin.ErrUnsupportedProtocol):
		return string(reason.ProtocolVersionMismatch)
	case errors.Is(err, plugin.ErrNotDeclared):
		return string(reason.CapabilityNotDeclared)
	case errors.Is(err, jsonrpchost.ErrHandshake), errors.Is(err, jsonrpchost.ErrManifest):
		return string(reason.HandshakeFailed)
	}
	return string(reason.LaunchFailed)
}

func grantText(gr policy.Grants) string { return gr.String() }

// installedGrantText is grantText saying when the filesystem level is the default rule
// rather than something the manifest declared.
func installedGrantText(configDir string, en *plugin.Entry) string {
	man, _, err := plugin.LoadManifest(plugin.Dir(configDir, en.Name))
	if err != nil || !man.FilesystemDefaulted() || en.Granted.FS() != policy.FilesystemDefault {
		return grantText(en.Granted)
	}
	return en.Granted.String() + " by default"
}

// ListOptions is `fledge plugins list`.
type ListOptions struct {
	g    *Globals
	JSON bool
}

func newListCmd(g *Globals) *cobra.Command {
	o := &ListOptions{g: g}
	c := &cobra.Command{
		Use:   "list",
		Short: "List installed plugins and what they were granted",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	return c
}

func (o *ListOptions) Run() error {
	cd, err := o.g.configDir()
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	list, err := plugin.List(cd)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	entries := make([]*plugin.Entry, 0, len(list))
	for i := range list {
		entries = append(entries, &list[i])
	}
	if o.JSON {
		out := make([]map[string]any, 0, len(entries))
		for _, en := range entries {
			out = append(out, entryJSON(en))
		}
		return writeJSON(o.g.Streams.Out, out)
	}
	if len(entries) == 0 {
		fmt.Fprintln(o.g.Streams.Out, "no plugins installed")
		return nil
	}
	tw := tabwriter.NewWriter(o.g.Streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tCOMMANDS\tGRANTED\tSOURCE")
	for _, en := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", en.Name, en.Version, strings.Join(en.Commands, ","), grantText(en.Granted), en.Source)
	}
	return tw.Flush()
}

func entryJSON(en *plugin.Entry) map[string]any {
	return map[string]any{
		"name": en.Name, "version": en.Version, "source": en.Source,
		"installed": en.Installed.UTC().Format(time.RFC3339), "commands": en.Commands,
		"granted": en.Granted, "manifest_sha256": en.ManifestSHA256, "protocol": en.Protocol,
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// InfoOptions is `fledge plugins info`.
type InfoOptions struct {
	g    *Globals
	Name string
	JSON bool
}

func newInfoCmd(g *Globals) *cobra.Command {
	o := &InfoOptions{g: g}
	c := &cobra.Command{
		Use:   "info <name>",
		Short: "Show a plugin: its grants and what the sandbox actually gives it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return o.Run()
		},
	}
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	return c
}

func (o *InfoOptions) Run() error {
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	defer e.close()
	pi, err := plugin.GetInfo(e.configDir, o.Name)
	if errors.Is(err, plugin.ErrNotInstalled) {
		return exitErr(ExitFailure, "no plugin named %q is installed", o.Name)
	}
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	en := &pi.Entry
	dir := pi.Dir
	paths := e.paths(dir, plugin.DataDir(e.configDir, en.Name), nil)
	paths.ProjectRoot = "<project>"
	rep := e.sb.Report()
	pa := policy.PluginAccess(paths, en.Granted, e.cfg)
	xa := policy.ExecAccess(paths, e.cfg)
	info := entryJSON(en)
	info["dir"] = dir
	info["data_dir"] = pi.DataDir
	// Only what was granted counts; a live manifest that changed is refused at run time.
	info["manifest_changed"] = pi.ManifestChanged
	if pi.Declared != nil {
		info["declared"] = pi.Declared.Names()
	}
	info["sandbox"] = map[string]any{
		"confinement": rep.Confinement, "landlock_abi": rep.LandlockABI, "cgroup": rep.CgroupMode,
		"tree_kill": rep.TreeKill, "strict": e.cfg.Sandbox.Strict,
	}
	info["plugin_process"] = map[string]any{
		"read_write": pa.ReadWrite, "read_only": pa.ReadOnly, "read_exec": pa.ReadExec,
		"network": en.Granted.Network && e.cfg.NetworkAllowed(), "limits": limitsJSON(e.cfg.PluginLimits()),
		"unix_sockets": e.cfg.UnixSocketsAllowed(),
	}
	info["exec"] = map[string]any{
		"allowed": en.Granted.Exec, "read_write": xa.ReadWrite, "read_only": xa.ReadOnly, "read_exec": xa.ReadExec,
		"unprotect": unprotectJSON(e.cfg),
		"network":   e.cfg.NetworkAllowed(), "limits": limitsJSON(e.cfg.ExecLimits()),
		"unix_sockets": e.cfg.UnixSocketsAllowed(),
	}
	handshake := recordedHandshake(en, dir)
	if handshake != nil {
		info["handshake"] = handshake
	}
	var wasm map[string]any
	if pi.Manifest != nil && pi.Manifest.IsWasm() {
		wasm = wasmInfo(e, &en.Granted, plugin.DataDir(e.configDir, en.Name))
		info["runtime"], info["plugin_process"] = plugin.RuntimeWasm, wasm
	}
	if o.JSON {
		return writeJSON(o.g.Streams.Out, info)
	}
	w := o.g.Streams.Out
	fmt.Fprintf(w, "%s %s\n  source:    %s\n  installed: %s\n  commands:  %s\n  manifest:  sha256:%s\n  granted:   %s\n",
		en.Name, en.Version, en.Source, en.Installed.UTC().Format(time.RFC3339), strings.Join(en.Commands, ", "),
		en.ManifestSHA256, grantText(en.Granted))
	if pi.ManifestChanged {
		fmt.Fprintln(w, "  manifest:  CHANGED since it was approved: runs are refused until it is reinstalled")
	}
	fmt.Fprintf(w, "  protocol:  %s\n", protocolName(en.Protocol))
	fmt.Fprintf(w, "  sandbox:   confinement=%s landlock_abi=%d cgroup=%s tree_kill=%s strict=%v\n",
		rep.Confinement, rep.LandlockABI, rep.CgroupMode, rep.TreeKill, e.cfg.Sandbox.Strict)
	if wasm != nil {
		fmt.Fprintf(w, "  runtime:   wasm: %s\n", wasmInfoText(wasm))
	} else {
		fmt.Fprintf(w, "  plugin process may write: %s\n", strings.Join(pa.ReadWrite, ", "))
		fmt.Fprintf(w, "  plugin process may read:  %s\n", strings.Join(pa.ReadOnly, ", "))
		fmt.Fprintf(w, "  plugin network:           %v\n", en.Granted.Network && e.cfg.NetworkAllowed())
	}
	if en.Granted.Exec {
		fmt.Fprintf(w, "  exec'd commands may write: %s\n", strings.Join(xa.ReadWrite, ", "))
		if len(xa.Unprotect) > 0 {
			fmt.Fprintf(w, "  ...including (policy unprotect): %s\n", strings.Join(xa.Unprotect, ", "))
		}
	} else {
		fmt.Fprintln(w, "  exec: not granted (every exec request is refused with code 126)")
	}
	if handshake != nil {
		showHandshakeInfo(w, handshake)
	}
	return nil
}

// RemoveOptions is `fledge plugins remove`.
type RemoveOptions struct {
	g    *Globals
	Name string
}

func newRemoveCmd(g *Globals) *cobra.Command {
	o := &RemoveOptions{g: g}
	return &cobra.Command{
		Use:   "remove <name>",
		Short: "Remove an installed plugin and its data",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return o.Run()
		},
	}
}

func (o *RemoveOptions) Run() error {
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	defer e.close()
	log, err := e.openAudit()
	if err != nil {
		return err
	}
	en, err := plugin.Remove(e.configDir, o.Name)
	if err != nil {
		if errors.Is(err, plugin.ErrNotInstalled) {
			return exitErr(ExitFailure, "no plugin named %q is installed", o.Name)
		}
		return exitErr(ExitFailure, "remove %s: %v", o.Name, err)
	}
	_ = e.NewRecorder(log, &audit.PluginRef{Name: en.Name, Version: en.Version, Source: en.Source, ManifestDigest: en.ManifestSHA256}, nil).
		RecordNow(audit.EventRemove, audit.Allow, reason.OK, nil)
	fmt.Fprintf(o.g.Streams.Out, "removed %s\n", en.Name)
	return nil
}

// hookRunner runs an install hook the user asked for (--run-hooks) as a confined exec whose
// only writable place is the staged plugin dir; hooks are plugin code like any other.
func hookRunner(e *env, log *audit.Log, out io.Writer) plugin.HookRunner {
	return func(ctx context.Context, dir string, h plugin.Hook) error {
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		spec := e.cfg.HookSpec(e.paths(dir, dir, nil), os.Environ())
		spec.Kind, spec.Name, spec.Path, spec.Args = sandbox.KindExec, "install-hook", "/bin/sh", []string{"sh", "-c", h.Command}
		// Hook output is plugin bytes: on a terminal, sanitised like every plugin's.
		hookOut, flush := pluginStderr(out)
		defer flush()
		spec.Dir, spec.DirPath, spec.Stdout, spec.Stderr = d, dir, hookOut, hookOut
		rec := e.NewRecorder(log, nil, nil)
		sync, err := rec.BeforeAct(audit.EventExecDecision, map[string]any{"hook": h.Name, "command": h.Command, "cwd": dir})
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		spec.BeforeExec = sync
		proc, err := e.sb.Start(ctx, &spec)
		if sync != nil {
			_ = sync()
		}
		if err != nil {
			return err
		}
		res, err := proc.Wait()
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
