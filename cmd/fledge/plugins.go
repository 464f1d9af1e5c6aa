// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/ui"
)

func newPluginsCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "plugins",
		Short: "Install, list, inspect and remove plugins",
	}
	c.AddCommand(newInstallCmd(g), newListCmd(g), newInfoCmd(g), newGrantCmd(g), newRevokeCmd(g), newRemoveCmd(g), newUpdateCmd(g), newReviewCmd(g), newApproveCmd(g), newNewCmd(g), newPluginToolsCmd(g))
	c.AddCommand(newLearnCmd(g), newLogsCmd(g), newLockCmd(g), newSyncCmd(g))
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
	// Package are the flags of a package source (npm:PKG; install_package.go).
	Package protocolhost.PackageRequest
}

// uiAsker asks install questions on the terminal.
type uiAsker struct{ u ui.UI }

func (a uiAsker) Confirm(question string, def bool) (bool, error) {
	return a.u.Confirm(context.Background(), "install", question, &def)
}

func newInstallCmd(g *Globals) *cobra.Command {
	o := &InstallOptions{g: g}
	c := &cobra.Command{
		Use:   "install <dir|git-url> | npm:PKG [--version V] [-- ARGS...] | pypi:PKG[==V] [-- ARGS...] | oci:IMAGE | oci-archive:FILE | <executable> --protocol P | --from-dir DIR --protocol P",
		Short: "Install a plugin, granting only the capabilities you approve",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				args, o.Package.ServerArgs = args[:dash], args[dash:]
				if len(args) != 1 || !plugin.IsPackageSource(args[0]) {
					return exitErr(ExitUsage, "arguments after -- are a package server's (npm:PKG -- ARGS..., oci:IMAGE -- ARGS...)")
				}
			}
			if len(args) > 1 {
				return exitErr(ExitUsage, "install takes one source (a dir, git URL, npm:PKG, pypi:PKG or executable)")
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
	c.Flags().StringVar(&o.Protocol, "protocol", "", "the protocol of a bare executable (or of every executable of --from-dir): "+plugin.ProtocolJSONRPC)
	c.Flags().StringVar(&o.FromDir, "from-dir", "", "install every executable of a plugin dir as a JSON-RPC 2.0 host scans it (hidden files skipped; needs --protocol)")
	addPackageFlags(c, &o.Package)
	c.Flags().BoolVarP(&o.Yes, "yes", "y", false, "grant every capability the manifest declares")
	c.Flags().StringVar(&o.Grant, "grant", "", "grant only these capabilities: exec,store,metadata,network,filesystem[=project|project-rw|plugin]; MCP servers also sampling,elicitation (with --yes: added to everything declared)")
	c.Flags().BoolVar(&o.RunHooks, "run-hooks", false, "run the plugin's build hooks (shown first)")
	return c
}

func (o *InstallOptions) Run(ctx context.Context) error {
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	u := ui.New(ui.Options{In: o.g.Streams.In, Out: o.g.Streams.Out, Err: o.g.Streams.Err, NonInteractive: o.g.nonInteractive()})
	defer u.Close()
	return h.Install(ctx, protocolhost.InstallRequest{
		Source: o.Source, Yes: o.Yes, Grant: o.Grant, GrantSet: o.GrantSet, RunHooks: o.RunHooks,
		Protocol: o.Protocol, FromDir: o.FromDir, Package: o.Package,
		Asker: uiAsker{u}, NonInteractive: !u.Interactive(),
	})
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
			out = append(out, protocolhost.EntryJSON(en))
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", en.Name, en.Version, strings.Join(en.Commands, ","), en.Granted.String(), en.Source)
	}
	return tw.Flush()
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
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	info, err := h.Info(o.Name)
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.g.Streams.Out, info.JSON())
	}
	info.WriteText(o.g.Streams.Out)
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
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	r, err := h.Remove(o.Name)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.g.Streams.Out, "removed %s\n", r.Name)
	for _, n := range r.UnusedSecrets {
		fmt.Fprintf(o.g.Streams.Err, "fledge: the stored secret %s is used by no installed plugin now; it stays stored until you delete it: fledge secrets remove %s\n", n, n)
	}
	return nil
}
