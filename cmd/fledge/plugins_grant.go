// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/ui"
)

// GrantOptions is `fledge plugins grant` and `fledge plugins revoke`: one capability, one
// change, one audit record.
type GrantOptions struct {
	g      *Globals
	Name   string
	Item   string
	Revoke bool
	// Yes grants the whole network (or project-rw) without the question a terminal gets.
	Yes bool
}

func newGrantCmd(g *Globals) *cobra.Command {
	o := &GrantOptions{g: g}
	c := &cobra.Command{
		Use:   "grant <name> <capability>[=value]",
		Short: "Grant an installed plugin one more capability",
		Long: `Grant an installed plugin one more capability: exec, store, metadata,
network=HOST:PORT (one destination), network or network=true (the WHOLE network, as
plugin.toml's network = true: asked again on a terminal unless --yes), secret=NAME,
filesystem[=none|plugin|project|project-rw] (a bare "filesystem" is the level the plugin asks for, else
project), or read=PATH (one file or directory, read-only, for the plugin and its commands;
never a key or token store such as ~/.ssh, nor fledge's own config and state; 'fledge
plugins learn' proposes these). network=false grants nothing: 'fledge plugins revoke NAME
network' takes the network away.

exec, store and metadata can only be granted when the plugin's manifest declares them.
network and filesystem are the sandbox's to give: you may grant them even when the plugin
did not ask, and fledge warns that it did not. The change is recorded in the audit log
(event "grant"); the approved plugin.toml is unchanged, so an edited manifest is still
refused at run time.`,
		Example: "  fledge plugins grant envcheck network=api.github.com:443\n  fledge plugins grant deploy filesystem=project",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Item = args[0], args[1]
			return o.Run()
		},
	}
	c.Flags().BoolVarP(&o.Yes, "yes", "y", false, "grant the whole network or filesystem=project-rw without asking")
	return c
}

func newRevokeCmd(g *Globals) *cobra.Command {
	o := &GrantOptions{g: g, Revoke: true}
	return &cobra.Command{
		Use:   "revoke <name> <capability>",
		Short: "Take one capability back from an installed plugin",
		Long: `Take one capability back from an installed plugin: exec, store, metadata, network
(the whole network and every destination: each one dropped is listed), network=HOST:PORT
(one destination), secret=NAME, filesystem (the plugin process then reads nothing of the
project, whatever its manifest says), or read=PATH. Recorded in the audit log (event
"revoke").`,
		Example: "  fledge plugins revoke envcheck filesystem",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Item = args[0], args[1]
			return o.Run()
		},
	}
}

func (o *GrantOptions) Run() error {
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	if !o.Revoke && protocolhost.WritesProject(o.Item) {
		// As strong as the whole network for the project's files: said in full, asked again.
		fmt.Fprintf(o.g.Streams.Err, "fledge: filesystem=project-rw lets %s's own process change any file of the project (git hooks, configs and the other protected paths stay read-only)\n", o.Name)
		u := ui.New(ui.Options{In: o.g.Streams.In, Out: o.g.Streams.Out, Err: o.g.Streams.Err, NonInteractive: o.g.nonInteractive()})
		defer u.Close()
		if u.Interactive() && !o.Yes {
			ok, err := uiAsker{u}.Confirm(fmt.Sprintf("Let %s write the project?", o.Name), false)
			if err != nil {
				return exitErr(ExitInterrupted, "grant %s filesystem=project-rw: %v", o.Name, err)
			}
			if !ok {
				return exitErr(ExitFailure, "grant %s filesystem=project-rw: declined; nothing changed", o.Name)
			}
		}
	}
	if !o.Revoke && protocolhost.WholeNetwork(o.Item) {
		// The strongest sandbox grant: said in full, and asked again on a terminal.
		fmt.Fprintf(o.g.Streams.Err, "fledge: network lets %s reach the WHOLE network, every host and port, from the plugin and its commands; network=HOST:PORT grants one destination\n", o.Name)
		u := ui.New(ui.Options{In: o.g.Streams.In, Out: o.g.Streams.Out, Err: o.g.Streams.Err, NonInteractive: o.g.nonInteractive()})
		defer u.Close()
		if u.Interactive() && !o.Yes {
			ok, err := uiAsker{u}.Confirm(fmt.Sprintf("Grant the whole network to %s?", o.Name), false)
			if err != nil {
				return exitErr(ExitInterrupted, "grant %s network: %v", o.Name, err)
			}
			if !ok {
				return exitErr(ExitFailure, "grant %s network: declined; nothing changed", o.Name)
			}
		}
	}
	c, err := h.ChangeGrant(o.Name, o.Item, o.Revoke)
	if err != nil {
		return err
	}
	if !o.Revoke {
		for _, u := range c.Unrequested {
			fmt.Fprintf(o.g.Streams.Err, "fledge: warning: plugin %s did not ask for %s (its plugin.toml does not declare it); granted because you asked\n", c.Plugin, u)
		}
	}
	switch {
	case !c.Changed && o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "%s did not hold %s; granted: %s\n", c.Plugin, c.Item, c.After)
	case !c.Changed:
		fmt.Fprintf(o.g.Streams.Out, "%s already held %s; granted: %s\n", c.Plugin, c.Item, c.After)
	case o.Revoke && c.Item == "network" && !slices.Equal(c.Dropped, []string{"network"}):
		// Revoking network drops every destination too: each is named.
		dropped := make([]string, len(c.Dropped))
		for i, d := range c.Dropped {
			if d == "network" {
				d = "the whole network"
			}
			dropped[i] = d
		}
		fmt.Fprintf(o.g.Streams.Out, "revoked %s from %s (dropped: %s); granted: %s\n", c.Item, c.Plugin, strings.Join(dropped, ", "), c.After)
	case o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "revoked %s from %s; granted: %s\n", c.Item, c.Plugin, c.After)
	default:
		fmt.Fprintf(o.g.Streams.Out, "granted %s to %s; granted: %s\n", c.Item, c.Plugin, c.After)
	}
	return nil
}
