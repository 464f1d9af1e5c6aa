package main

import "github.com/spf13/cobra"

// newServeCmd is `fledge serve`: fledge as a server over stdio for its hosted tools. The
// MCP mode is in serve_mcp.go (--mcp); the jsonrpc-2.0 mode (--protocol) comes from its own
// file. (Minimal here: the lead merges this with the jsonrpc branch's serve.go.)
func newServeCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "serve --mcp [--tools a,b]",
		Short: "Serve every tool fledge hosts over stdio (as an MCP server with --mcp)",
		Args:  cobra.NoArgs,
	}
	o := addServeMCPFlags(c)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if !o.enabled {
			return exitErr(ExitUsage, "serve needs a mode: --mcp")
		}
		return runServeMCP(cmd.Context(), g, o)
	}
	return c
}
