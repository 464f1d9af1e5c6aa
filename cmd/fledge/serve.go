package main

import (
	"context"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/jsonrpc"
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
}

// servers are the protocols `fledge serve` speaks on stdin/stdout.
var servers = map[string]func(ctx context.Context, o *ServeOptions, t *toolsEnv) error{
	plugin.ProtocolJSONRPC: serveJSONRPC,
}

func newServeCmd(g *Globals) *cobra.Command {
	o := &ServeOptions{g: g}
	c := &cobra.Command{
		Use:   "serve --protocol P | --mcp [--tools a,b]",
		Short: "Be one plugin of another host on stdin/stdout, running every installed plugin confined behind it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.PrioritySet = cmd.Flags().Changed("priority")
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringVar(&o.Protocol, "protocol", "", "the protocol to speak: "+strings.Join(serverNames(), ", "))
	c.Flags().IntVar(&o.Priority, "priority", jsonrpc.DefaultPriority, "jsonrpc-2.0: the priority fledge announces to its host (default: [serve] priority in config.toml, else 500)")
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
	t, err := openTools(o.g)
	if err != nil {
		return err
	}
	defer t.close()
	if !o.PrioritySet {
		o.Priority = t.e.cfg.Serve.Priority
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, o, t)
}

func serveJSONRPC(ctx context.Context, o *ServeOptions, t *toolsEnv) error {
	p, bindings := t.jsonrpc(o.g.Streams.Err)
	if p == nil {
		return exitErr(ExitCannotRun, "the jsonrpc-2.0 adapter is not built in")
	}
	err := jsonrpc.Serve(ctx, jsonrpc.ServeOptions{
		In: o.g.Streams.In, Out: o.g.Streams.Out, Catalogue: t.cat, Provider: p, Bindings: bindings,
		Version: version, Priority: o.Priority, LineMax: int(t.e.cfg.Limits.LineMax),
		Warn: warnTo(o.g.Streams.Err),
	})
	if err != nil && ctx.Err() != nil {
		return &ExitError{Code: ExitInterrupted}
	}
	if err != nil {
		return exitErr(ExitFailure, "serve: %v", err)
	}
	return nil
}
