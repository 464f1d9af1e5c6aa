// SPDX-License-Identifier: MIT

package main

import (
	"github.com/spf13/cobra"
)

func newLogsCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "logs <name>",
		Short: "Show what a plugin's servers wrote on stderr",
		Long: `Show the stderr log of an installed plugin: what its MCP server or JSON-RPC 2.0
plugin wrote on stderr while fledge ran it for 'fledge tools', 'fledge serve' or a hook.
A server's stderr does not reach your terminal (a usage banner, a stack trace at close): it
is kept here, bounded (256 KiB, and the file before it), in fledge's state directory where
no plugin can write. fledge shows its end when a server fails, and all of it live with -v.
A fledge-v1 or legacy plugin's stderr is the plugin talking to you: it is shown as it
comes and not kept. Every line is sanitised: no escape sequence reaches the terminal.`,
		Example: "  fledge plugins logs server-everything",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			return h.ShowPluginLog(args[0], g.Streams.Out)
		},
	}
}
