// SPDX-License-Identifier: MIT

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newReviewCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "review <name>",
		Short: "Show the tool definitions that changed since they were approved",
		Long: `Show what changed in a plugin's tool definitions (name, description, input schema, the
server's instructions) since fledge pinned them: the tools fledge holds back from 'tools list',
'tools call' and 'serve --mcp' until you approve them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			_, err = h.ReviewTools(args[0], g.Streams.Out)
			return err
		},
	}
}

func newApproveCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "approve <name>",
		Short: "Accept a plugin's changed tool definitions (recorded in the audit log)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			changes, err := h.ApproveTools(args[0])
			if err != nil {
				return err
			}
			for _, c := range changes {
				fmt.Fprintf(g.Streams.Out, "approved %s (%s)\n", c.Tool, c.New)
			}
			return nil
		},
	}
}
