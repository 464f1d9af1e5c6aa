// SPDX-License-Identifier: MIT

package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost"
)

func init() {
	servers[plugin.ProtocolMCP] = serveMCP
}

// addServeMCPFlags adds --mcp and --tools to the serve command.
func addServeMCPFlags(c *cobra.Command, o *ServeOptions) {
	c.Flags().BoolVar(&o.MCP, "mcp", false, "be an MCP server on stdio whose tools are every tool fledge hosts (the same as --protocol mcp)")
	c.Flags().StringSliceVar(&o.Tools, "tools", nil, "mcp: expose only these tools (plugin_<plugin>_<tool>, comma-separated)")
}

// resolveMCP turns --mcp into --protocol mcp; --tools belongs to the MCP server only.
func (o *ServeOptions) resolveMCP() error {
	if o.MCP {
		if o.Protocol != "" && o.Protocol != plugin.ProtocolMCP {
			return exitErr(ExitUsage, "serve: --mcp and --protocol %s contradict each other", o.Protocol)
		}
		o.Protocol = plugin.ProtocolMCP
	}
	if len(o.Tools) > 0 && o.Protocol != plugin.ProtocolMCP {
		return exitErr(ExitUsage, "serve: --tools applies to --mcp")
	}
	return nil
}

// serveMCP serves the tools catalogue as one MCP server on stdin/stdout. Stdout carries the
// protocol only: plugins' stderr and fledge's warnings go to stderr.
func serveMCP(ctx context.Context, o *ServeOptions, t *protocolhost.ToolSet) error {
	return t.ServeMCP(ctx, o.g.Streams.In, nopWriteCloser{o.g.Streams.Out}, o.Tools)
}

type nopWriteCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (n nopWriteCloser) Write(p []byte) (int, error) { return n.w.Write(p) }
func (nopWriteCloser) Close() error                  { return nil }
