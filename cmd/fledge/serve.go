// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost"
)

// ServeOptions is `fledge serve`: fledge as one plugin (or server) of another host, with
// every installed plugin behind it confined. Each protocol fledge can serve registers a
// server in servers; flags shared by all of them are parsed here, once.
type ServeOptions struct {
	g           *Globals
	Protocol    string
	Priority    int
	PrioritySet bool
	// MCP (--mcp) is --protocol mcp; Tools (--tools) limits what it exposes (serve_mcp.go).
	MCP   bool
	Tools []string
	// Listen (--listen) serves MCP over Streamable HTTP instead of stdio, with
	// --listen-public, --tls-cert/--tls-key, --token-file and --max-sessions (serve_mcp.go).
	Listen, TLSCert, TLSKey, TokenFile string
	ListenPublic                       bool
	MaxSessions                        int
}

// servers are the protocols `fledge serve` speaks on stdin/stdout.
var servers = map[string]func(ctx context.Context, o *ServeOptions, t *protocolhost.ToolSet) error{
	plugin.ProtocolJSONRPC: serveJSONRPC,
}

func newServeCmd(g *Globals) *cobra.Command {
	o := &ServeOptions{g: g}
	c := &cobra.Command{
		Use:   "serve --protocol P | --mcp [--tools a,b] [--listen HOST:PORT]",
		Short: "Be one plugin of another host on stdin/stdout, running every installed plugin confined behind it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.PrioritySet = cmd.Flags().Changed("priority")
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringVar(&o.Protocol, "protocol", "", "the protocol to speak: "+strings.Join(serverNames(), ", "))
	c.Flags().IntVar(&o.Priority, "priority", protocolhost.DefaultPriority, "jsonrpc-2.0: the priority fledge announces to its host (default: [serve] priority in config.toml, else 500)")
	addServeMCPFlags(c, o)
	return c
}

func serverNames() []string {
	out := make([]string, 0, len(servers))
	for n := range servers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (o *ServeOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := o.resolveMCP(); err != nil {
		return err
	}
	run := servers[o.Protocol]
	if run == nil {
		return exitErr(ExitUsage, "serve: --protocol must be one of %s", strings.Join(serverNames(), ", "))
	}
	t, done, err := openTools(o.g)
	if err != nil {
		return err
	}
	defer done()
	if !o.PrioritySet {
		o.Priority = t.ServePriority()
	}
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	return run(ctx, o, t)
}

func serveJSONRPC(ctx context.Context, o *ServeOptions, t *protocolhost.ToolSet) error {
	return t.ServeJSONRPC(ctx, o.g.Streams.In, o.g.Streams.Out, o.Priority)
}
