// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"fmt"

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
	c.Flags().StringVar(&o.Listen, "listen", "", "mcp: serve MCP's Streamable HTTP transport at http://HOST:PORT/mcp instead of stdio (loopback unless --listen-public)")
	c.Flags().BoolVar(&o.ListenPublic, "listen-public", false, "mcp: allow --listen on an address that is not loopback (needs --tls-cert and --tls-key)")
	c.Flags().StringVar(&o.TLSCert, "tls-cert", "", "mcp: TLS certificate file (PEM) for --listen")
	c.Flags().StringVar(&o.TLSKey, "tls-key", "", "mcp: TLS private key file (PEM) for --listen")
	c.Flags().StringVar(&o.TokenFile, "token-file", "", "mcp: the bearer token clients of --listen must send (default: one generated in fledge's state dir)")
	c.Flags().IntVar(&o.MaxSessions, "max-sessions", 0, "mcp: client sessions of --listen open at once (default 8)")
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
	if o.Protocol != plugin.ProtocolMCP && (o.Listen != "" || o.ListenPublic || o.TLSCert != "" || o.TLSKey != "" || o.TokenFile != "") {
		return exitErr(ExitUsage, "serve: --listen, --listen-public, --tls-cert, --tls-key and --token-file apply to --mcp")
	}
	if o.Listen == "" && (o.ListenPublic || o.TLSCert != "" || o.TLSKey != "" || o.TokenFile != "" || o.MaxSessions != 0) {
		return exitErr(ExitUsage, "serve --mcp: --listen-public, --tls-cert, --tls-key, --token-file and --max-sessions apply to --listen")
	}
	if o.MaxSessions < 0 {
		return exitErr(ExitUsage, "serve --mcp: --max-sessions must be positive")
	}
	if o.Listen != "" {
		// Checked before anything opens: a public address without TLS is a usage error.
		return protocolhost.CheckListen(o.httpOptions())
	}
	return nil
}

func (o *ServeOptions) httpOptions() protocolhost.MCPHTTPOptions {
	return protocolhost.MCPHTTPOptions{
		Listen: o.Listen, Public: o.ListenPublic, CertFile: o.TLSCert, KeyFile: o.TLSKey,
		TokenFile: o.TokenFile, MaxSessions: o.MaxSessions, Only: o.Tools,
		Ready: func(url, tokenFile string) {
			fmt.Fprintf(o.g.Streams.Err, "fledge: serving MCP over Streamable HTTP at %s (bearer token in %s)\n", url, tokenFile)
		},
	}
}

// serveMCP serves the tools catalogue as one MCP server on stdin/stdout. Stdout carries the
// protocol only: plugins' stderr and fledge's warnings go to stderr.
func serveMCP(ctx context.Context, o *ServeOptions, t *protocolhost.ToolSet) error {
	if o.Listen != "" {
		return t.ServeMCPHTTP(ctx, o.httpOptions())
	}
	return t.ServeMCP(ctx, o.g.Streams.In, nopWriteCloser{o.g.Streams.Out}, o.Tools)
}

type nopWriteCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (n nopWriteCloser) Write(p []byte) (int, error) { return n.w.Write(p) }
func (nopWriteCloser) Close() error                  { return nil }
