package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/mcp"
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
func serveMCP(ctx context.Context, o *ServeOptions, t *toolsEnv) error {
	mcp.Version = version
	err := mcp.Serve(ctx, t.cat, o.g.Streams.In, nopWriteCloser{o.g.Streams.Out}, mcp.ServeOptions{
		Only:    o.Tools,
		LineMax: int(t.e.cfg.Limits.LineMax),
		Warn:    warnTo(o.g.Streams.Err),
	})
	switch {
	case errors.Is(err, mcp.ErrNoSuchTool):
		return exitErr(ExitUsage, "serve --mcp: %v", err)
	case err != nil && ctx.Err() != nil:
		return &ExitError{Code: ExitInterrupted}
	case err != nil:
		return exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	return nil
}

type nopWriteCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (n nopWriteCloser) Write(p []byte) (int, error) { return n.w.Write(p) }
func (nopWriteCloser) Close() error                  { return nil }
