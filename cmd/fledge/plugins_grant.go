package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// GrantOptions is `fledge plugins grant` and `fledge plugins revoke`: one capability, one
// change, one audit record.
type GrantOptions struct {
	g      *Globals
	Name   string
	Item   string
	Revoke bool
}

func newGrantCmd(g *Globals) *cobra.Command {
	o := &GrantOptions{g: g}
	return &cobra.Command{
		Use:   "grant <name> <capability>[=value]",
		Short: "Grant an installed plugin one more capability",
		Long: `Grant an installed plugin one more capability: exec, store, metadata, network,
filesystem[=none|plugin|project] (a bare "filesystem" is the level the plugin asks for, else
project), or read=PATH (one file or directory, read-only, for the plugin and its commands;
never a key or token store such as ~/.ssh, nor fledge's own config and state; 'fledge
plugins learn' proposes these).

exec, store and metadata can only be granted when the plugin's manifest declares them.
network and filesystem are the sandbox's to give: you may grant them even when the plugin
did not ask, and fledge warns that it did not. The change is recorded in the audit log
(event "grant"); the approved plugin.toml is unchanged, so an edited manifest is still
refused at run time.`,
		Example: "  fledge plugins grant envcheck network\n  fledge plugins grant deploy filesystem=project",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Item = args[0], args[1]
			return o.Run()
		},
	}
}

func newRevokeCmd(g *Globals) *cobra.Command {
	o := &GrantOptions{g: g, Revoke: true}
	return &cobra.Command{
		Use:   "revoke <name> <capability>",
		Short: "Take one capability back from an installed plugin",
		Long: `Take one capability back from an installed plugin: exec, store, metadata, network or
filesystem (the plugin process then reads nothing of the project, whatever its manifest
says), or read=PATH. Recorded in the audit log (event "revoke").`,
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
	case o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "revoked %s from %s; granted: %s\n", c.Item, c.Plugin, c.After)
	default:
		fmt.Fprintf(o.g.Streams.Out, "granted %s to %s; granted: %s\n", c.Item, c.Plugin, c.After)
	}
	return nil
}
