// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"

	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/ui"
)

// addPackageFlags are `plugins install npm:PKG`'s own flags; the server's arguments come
// after `--`.
func addPackageFlags(c *cobra.Command, p *protocolhost.PackageRequest) {
	c.Flags().StringVar(&p.Version, "version", "", "npm:PKG: the version, range or tag to install (default latest)")
	c.Flags().StringVar(&p.Name, "name", "", "npm:PKG: the plugin name (default: the package name without its scope)")
	c.Flags().StringVar(&p.Bin, "bin", "", "npm:PKG: which entry point, when the package has several")
	c.Flags().StringArrayVar(&p.Env, "env", nil, "npm:PKG: NAME=VALUE for the server (${FLEDGE_DATA_DIR}, ${FLEDGE_PROJECT_ROOT} expand when it starts)")
	c.Flags().StringArrayVar(&p.Secrets, "secret", nil, "npm:PKG: a secret the server needs: NAME@host:port binds it (the server holds a placeholder; fledge puts the value into its requests to host:port only), a bare NAME hands it the value")
	c.Flags().BoolVar(&p.Network, "network", false, "npm:PKG: the server asks for the network (granted only as you decide)")
	c.Flags().StringVar(&p.Filesystem, "filesystem", "", "npm:PKG: the filesystem level the server asks for: none, plugin, project or project-rw (project-rw: the server writes the project; default project)")
	c.Flags().BoolVar(&p.Force, "force", false, "npm:PKG: keep the plugin even when its server does not complete the MCP handshake (default: the install is undone)")
	c.Flags().StringVar(&p.Python, "python", "", "pypi:PKG: the interpreter the server runs with, outside your home dir (default /usr/bin/python3)")
	c.Flags().BoolVar(&p.AllowSdist, "allow-sdist", false, "pypi:PKG: build a package that has no wheel from its sdist, as a confined install hook (network to the index only, no home)")
}

func newUpdateCmd(g *Globals) *cobra.Command {
	var yes, all, force bool
	var grant string
	c := &cobra.Command{
		Use:   "update <name> | --all",
		Short: "Fetch an installed plugin again from its source, keeping grants it does not outgrow",
		Long: `Fetch an installed plugin again from where it came from (npm:PKG the way you asked for
it, as plugins.toml records it; a git URL; a dir), install it in place, and keep its grants
when the new manifest asks for no more than the one you approved. When it asks for more, or
an npm package would run with arguments or environment you did not give, you are asked on
a terminal; --yes and --ni grant nothing new and refuse instead (--grant names exactly what
to grant). state.json and data/ stay. An npm plugin's new version whose server does not
complete the MCP handshake is undone (--force keeps it).

--all updates every installed plugin, one after the other: one that is refused stays as it
was, the others are updated, and the exit status says whether any was refused.`,
		Example: "  fledge plugins update memory\n  fledge plugins update --all --yes",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return exitErr(ExitUsage, "update takes a plugin name or --all, not both")
			case !all && len(args) != 1:
				return exitErr(ExitUsage, "update takes the name of an installed plugin, or --all to update every installed plugin ('fledge plugins list' lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			u := ui.New(ui.Options{In: g.Streams.In, Out: g.Streams.Out, Err: g.Streams.Err, NonInteractive: g.nonInteractive()})
			defer u.Close()
			req := protocolhost.UpdateRequest{Yes: yes, Grant: grant, GrantSet: cmd.Flags().Changed("grant"),
				Asker: uiAsker{u}, NonInteractive: !u.Interactive(), Force: force}
			if !all {
				req.Name = args[0]
				return h.Update(cmd.Context(), req)
			}
			return updateAll(cmd.Context(), g, h, req)
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "answer no question: keep the grants, and refuse an update that asks for more than you decided on before")
	c.Flags().StringVar(&grant, "grant", "", "if the new version asks for more, grant exactly these: exec,store,metadata,network,filesystem[=project|project-rw|plugin]")
	c.Flags().BoolVar(&all, "all", false, "update every installed plugin")
	c.Flags().BoolVar(&force, "force", false, "npm:PKG: keep the new version even when its server does not complete the MCP handshake")
	return c
}

// updateAll updates every installed plugin in name order. One refused is said and left as
// it was; the others go on. The status is the first refusal's.
func updateAll(ctx context.Context, g *Globals, h *protocolhost.Host, req protocolhost.UpdateRequest) error {
	cd, err := g.configDir()
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	list, err := plugin.List(cd)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	if len(list) == 0 {
		fmt.Fprintln(g.Streams.Out, "no plugins installed")
		return nil
	}
	var failed []string
	code := ExitOK
	for _, en := range list {
		fmt.Fprintf(g.Streams.Err, "Updating %s from %s...\n", en.Name, en.Source)
		req.Name = en.Name
		if err := h.Update(ctx, req); err != nil {
			var ee *ExitError
			if errors.As(err, &ee) && ee.Code == ExitInterrupted {
				return err
			}
			printError(g.Streams.Err, err.Error())
			failed = append(failed, en.Name)
			if code == ExitOK {
				code = ExitFailure
				if errors.As(err, &ee) {
					code = ee.Code
				}
			}
		}
	}
	fmt.Fprintf(g.Streams.Out, "updated %d of %d plugins\n", len(list)-len(failed), len(list))
	if len(failed) > 0 {
		return exitErr(code, "not updated: %s (each stays as it was)", strings.Join(failed, ", "))
	}
	return nil
}
