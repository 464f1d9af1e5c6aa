package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
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
		Long: `Grant an installed plugin one more capability: exec, store, metadata, network or
filesystem[=none|plugin|project] (a bare "filesystem" is the level the plugin asks for, else
project).

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
says). Recorded in the audit log (event "revoke").`,
		Example: "  fledge plugins revoke envcheck filesystem",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Item = args[0], args[1]
			return o.Run()
		},
	}
}

func (o *GrantOptions) Run() error {
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	defer e.close()
	log, err := e.openAudit()
	if err != nil {
		return err
	}
	verb, event := "grant", audit.EventGrant
	change := func(m *plugin.Manifest, cur policy.Grants) (policy.Change, error) {
		return policy.GrantOne(cur, m.Declared(), m.Asked(), o.Item)
	}
	if o.Revoke {
		verb, event = "revoke", audit.EventRevoke
		change = func(_ *plugin.Manifest, cur policy.Grants) (policy.Change, error) {
			return policy.RevokeOne(cur, o.Item)
		}
	}
	entry, c, err := plugin.ChangeGrants(e.configDir, o.Name, change)
	if err != nil {
		code, rc := ExitFailure, reason.LaunchFailed
		switch {
		case errors.Is(err, plugin.ErrNotInstalled):
			return exitErr(ExitFailure, "no plugin named %q is installed", o.Name)
		case errors.Is(err, policy.ErrUnknownCapability):
			code, rc = ExitUsage, reason.CapabilityNotDeclared
		case errors.Is(err, policy.ErrNotDeclared), errors.Is(err, plugin.ErrLegacyNoGrants):
			code, rc = ExitUsage, reason.CapabilityNotDeclared
		case errors.Is(err, plugin.ErrManifestChanged):
			code = ExitCannotRun
		}
		_ = e.NewRecorder(log, refusedRefByName(e.configDir, o.Name), nil).RecordNow(event, audit.Deny, rc,
			map[string]any{audit.DetailCapability: o.Item, "error": err.Error()})
		return exitErr(code, "%s %s %s: %v", verb, o.Name, o.Item, err)
	}
	details := map[string]any{
		audit.DetailCapabilities: c.After.Names(), audit.DetailCapability: c.Item,
		"previous": c.Before.Names(), "changed": !c.Before.Equal(c.After),
	}
	if !o.Revoke {
		unrequested := c.Unrequested
		if unrequested == nil {
			unrequested = []string{}
		}
		details["unrequested"] = unrequested
	}
	ref := &audit.PluginRef{Name: entry.Name, Version: entry.Version, Source: entry.Source, ManifestDigest: entry.ManifestSHA256}
	if err := e.NewRecorder(log, ref, nil).RecordNow(event, audit.Allow, reason.OK, details); err != nil {
		// The registry already changed: say so rather than pretend it did not.
		_ = ui.HostLine(o.g.Streams.Err, fmt.Sprintf("fledge: warning: the audit log could not record this %s: %v", verb, err))
	}
	for _, u := range c.Unrequested {
		fmt.Fprintf(o.g.Streams.Err, "fledge: warning: plugin %s did not ask for %s (its plugin.toml does not declare it); granted because you asked\n", entry.Name, u)
	}
	switch {
	case c.Before.Equal(c.After) && o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "%s did not hold %s; granted: %s\n", entry.Name, c.Item, grantText(c.After))
	case c.Before.Equal(c.After):
		fmt.Fprintf(o.g.Streams.Out, "%s already held %s; granted: %s\n", entry.Name, c.Item, grantText(c.After))
	case o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "revoked %s from %s; granted: %s\n", c.Item, entry.Name, grantText(c.After))
	default:
		fmt.Fprintf(o.g.Streams.Out, "granted %s to %s; granted: %s\n", c.Item, entry.Name, grantText(c.After))
	}
	return nil
}

// refusedRefByName names the installed plugin a refused grant was about, when there is one.
func refusedRefByName(configDir, name string) *audit.PluginRef {
	reg, err := plugin.LoadRegistry(configDir)
	if err != nil {
		return nil
	}
	en := reg.Find(strings.TrimSpace(name))
	if en == nil {
		return nil
	}
	return &audit.PluginRef{Name: en.Name, Version: en.Version, Source: en.Source, ManifestDigest: en.ManifestSHA256}
}
