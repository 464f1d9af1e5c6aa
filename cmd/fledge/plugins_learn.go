// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/ui"
)

// LearnOptions is `fledge plugins learn NAME -- ARGS` (protocolhost.Host.Learn).
type LearnOptions struct {
	g       *Globals
	Name    string
	Command string
	Args    []string
}

func newLearnCmd(g *Globals) *cobra.Command {
	o := &LearnOptions{g: g}
	c := &cobra.Command{
		Use:   "learn <name> [--command CMD] [-- args...]",
		Short: "Run a plugin traced under its current grants and propose the smallest grant change",
		Long: `Run one command of an installed plugin in trace mode (see 'fledge run --trace'),
under the grants it holds now and never more, and print the smallest change to its grants
that would have let the accesses it was refused through: a path it read (read=PATH, the
path itself, not its directory), the project (filesystem=project; filesystem=project-rw
when the plugin's own process wrote it), the network. Each
proposal comes with its evidence (the syscall, the path or destination, how often) and as a
'fledge plugins grant' line to copy. Nothing is granted. Refusals no grant can lift (a
syscall on the kernel deny-list, a write outside the project or into its git metadata, a
key store such as ~/.ssh)
are listed apart.

The traced run is non-interactive, and everything it prints comes first, every line of
it marked "│ ": a plugin's words are never a line of the report. fledge's report follows
under a rule.`,
		Example: "  fledge plugins learn lint -- --fix src/",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Args = args[0], args[1:]
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringVar(&o.Command, "command", "", "the plugin command to run (default: the one named like the plugin, else its first)")
	return c
}

func (o *LearnOptions) Run(ctx context.Context) error {
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	note, err := h.Learn(ctx, o.Name, o.Command, o.Args, o.g.Streams.Out)
	if note != nil {
		// The run's own failure (often the very refusals above) is not learn's. One line,
		// after the report: a message quoting the plugin cannot start a line of its own.
		fmt.Fprintf(o.g.Streams.Err, "fledge: note: the traced run ended with: %s\n",
			strings.ReplaceAll(ui.PlainText(note.Error()), "\n", " "))
	}
	return err
}
