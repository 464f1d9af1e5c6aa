package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/mcphost"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/tools"
)

// serveMCPOptions are the flags of `fledge serve --mcp`.
type serveMCPOptions struct {
	enabled bool
	tools   []string
}

// addServeMCPFlags adds --mcp and --tools to the serve command.
func addServeMCPFlags(c *cobra.Command) *serveMCPOptions {
	o := &serveMCPOptions{}
	c.Flags().BoolVar(&o.enabled, "mcp", false, "be an MCP server on stdio whose tools are every tool fledge hosts")
	c.Flags().StringSliceVar(&o.tools, "tools", nil, "expose only these tools (plugin_<plugin>_<tool>, comma-separated)")
	return o
}

// runServeMCP serves the tools catalogue as one MCP server on stdin/stdout. Stdout carries
// the protocol only: plugins' stderr and fledge's warnings go to stderr.
func runServeMCP(ctx context.Context, g *Globals, o *serveMCPOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e, err := openEnv(g)
	if err != nil {
		return err
	}
	defer e.close()
	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	cwd, _ := os.Getwd()
	proj, err := project.Detect(cwd, g.Project)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	if _, err := e.openAudit(); err != nil {
		return err
	}
	mcphost.Version = version
	stderr, flush := pluginStderr(g.Streams.Err)
	defer flush()
	cat := tools.NewCatalogue(&tools.Host{Env: e.Env, Project: proj, Stderr: stderr}, reg)
	defer func() {
		if err := cat.Close(); err != nil {
			fmt.Fprintf(g.Streams.Err, "fledge: warning: %v\n", err)
		}
	}()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := nopWriteCloser{g.Streams.Out}
	err = mcphost.Serve(ctx, cat, g.Streams.In, out, mcphost.ServeOptions{
		Only:    o.tools,
		LineMax: int(e.cfg.Limits.LineMax),
		Warn:    func(m string) { fmt.Fprintf(g.Streams.Err, "fledge: warning: %s\n", m) },
	})
	if errors.Is(err, mcphost.ErrNoSuchTool) {
		return exitErr(ExitUsage, "serve --mcp: %v", err)
	}
	if err != nil {
		return exitErr(ExitCannotRun, "serve --mcp: %v", err)
	}
	return nil
}

type nopWriteCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (n nopWriteCloser) Write(p []byte) (int, error) { return n.w.Write(p) }
func (nopWriteCloser) Close() error                  { return nil }
