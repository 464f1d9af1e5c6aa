package main

import (
	"github.com/spf13/cobra"

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
	c.Flags().StringVar(&p.Filesystem, "filesystem", "", "npm:PKG: the filesystem level the server asks for: none, plugin or project (default project)")
}

func newUpdateCmd(g *Globals) *cobra.Command {
	var yes bool
	var grant string
	c := &cobra.Command{
		Use:   "update <name>",
		Short: "Fetch an installed plugin again from its source, keeping grants it does not outgrow",
		Long: `Fetch an installed plugin again from where it came from (npm:PKG the way you asked for
it, as plugins.toml records it; a git URL; a dir), install it in place, and keep its grants
when the new manifest asks for no more than the one you approved. When it asks for more, or
an npm package would run with arguments or environment you did not give, you are asked on
a terminal; --yes and --ni grant nothing new and refuse instead (--grant names exactly what
to grant). state.json and data/ stay.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			u := ui.New(ui.Options{In: g.Streams.In, Out: g.Streams.Out, Err: g.Streams.Err, NonInteractive: g.nonInteractive()})
			defer u.Close()
			return h.Update(cmd.Context(), protocolhost.UpdateRequest{Name: args[0], Yes: yes, Grant: grant, GrantSet: cmd.Flags().Changed("grant"),
				Asker: uiAsker{u}, NonInteractive: !u.Interactive()})
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "answer no question: keep the grants, and refuse an update that asks for more than you decided on before")
	c.Flags().StringVar(&grant, "grant", "", "if the new version asks for more, grant exactly these: exec,store,metadata,network,filesystem[=project|plugin]")
	return c
}
