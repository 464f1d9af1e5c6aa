// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/ui"
)

// PluginToolsOptions is `fledge plugins tools NAME`: a plugin's tools and their state under
// the tool rules, and changes to the user's rules.
type PluginToolsOptions struct {
	g           *Globals
	Name        string
	Allow, Deny []string
	Reset       bool
	JSON        bool
}

func newPluginToolsCmd(g *Globals) *cobra.Command {
	o := &PluginToolsOptions{g: g}
	c := &cobra.Command{
		Use:   "tools <name>",
		Short: "List a plugin's tools with their state; allow or deny them by glob (recorded in the audit log)",
		Long: `List the tools a plugin (an MCP server, a JSON-RPC 2.0 plugin...) offers, each allowed or
denied, and by which rule. --allow and --deny add a glob over the plugin's own tool names
('read_*', 'write_file'; '*' any run of characters, '?' one); --reset removes every rule first.
A deny wins over an allow; once an allow is set, only the tools it matches are offered. The
machine's managed policy ([tools] in managed.toml) comes before your rules. A denied tool is
not listed by 'tools list' nor offered by 'serve --mcp', and a call to it is refused
(reason tool_denied).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringArrayVar(&o.Allow, "allow", nil, "allow the tools matching this glob (repeatable)")
	c.Flags().StringArrayVar(&o.Deny, "deny", nil, "deny the tools matching this glob (repeatable)")
	c.Flags().BoolVar(&o.Reset, "reset", false, "remove every rule of yours first")
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	return c
}

func (o *PluginToolsOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	ch := protocolhost.ToolRuleChange{Allow: o.Allow, Deny: o.Deny, Reset: o.Reset}
	if !ch.Empty() {
		rules, err := h.ChangeToolRules(o.Name, ch)
		if err != nil {
			return err
		}
		if !o.JSON {
			if rules == nil {
				fmt.Fprintf(o.g.Streams.Out, "%s: no tool rules\n", o.Name)
			} else {
				fmt.Fprintf(o.g.Streams.Out, "%s: allow %s; deny %s\n", o.Name, orNone(rules.Allow), orNone(rules.Deny))
			}
		}
	}
	t, err := h.OpenTools()
	if err != nil {
		return err
	}
	defer t.Close()
	states, err := t.PluginToolStates(ctx, o.Name)
	if err != nil {
		return err
	}
	if o.JSON {
		out := make([]map[string]any, 0, len(states))
		for _, s := range states {
			m := map[string]any{"name": s.Name, "tool": s.Tool.Tool, "allowed": s.Allowed}
			if s.Rule != "" {
				m["by"], m["rule"] = s.By, s.Rule
			}
			out = append(out, m)
		}
		return writeJSON(o.g.Streams.Out, map[string]any{"plugin": o.Name, "tools": out})
	}
	if len(states) == 0 {
		fmt.Fprintf(o.g.Streams.Out, "%s offers no tools\n", o.Name)
		return nil
	}
	for _, s := range states {
		state := "allowed"
		if !s.Allowed {
			state = "DENIED by " + s.By + ": " + s.Rule
		}
		fmt.Fprintf(o.g.Streams.Out, "  %-28s %s\n", ui.Sanitize(s.Tool.Tool), ui.Sanitize(state))
	}
	return nil
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "(none)"
	}
	return strings.Join(list, ", ")
}
