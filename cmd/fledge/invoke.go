package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/invokev1"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// InvokeOptions is `fledge invoke`.
type InvokeOptions struct {
	g       *Globals
	Plugin  string
	Type    string
	Action  string
	Request string
	JSON    bool
}

func newInvokeCmd(g *Globals) *cobra.Command {
	o := &InvokeOptions{g: g}
	c := &cobra.Command{
		Use:   "invoke <plugin> --type T --action A [--request JSON] [--json]",
		Short: "Send one request to an invoke-v1 plugin and stream its response",
		Long: `invoke starts an invoke-v1 plugin, waits for it to be ready, sends one request and
prints each plugin_response chunk as it arrives (one JSON value per line; a string chunk
is printed as text). The plugin's info lines go to stderr. With --json every message of
the request (info, plugin_response, plugin_invoke_end, error) is one JSON line on stdout.

A failure of fledge's prints its reason code and exits with the status docs/cli.md lists
(timeout 124, crashed 108, limit_exceeded 109, launch_failed 126, ...); an error the
plugin reports for the request exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Plugin = args[0]
			return runInvoke(cmd.Context(), o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Type, "type", "", "access type (tool, model, endpoint, ...)")
	f.StringVar(&o.Action, "action", "", "action (invoke_tool, invoke_llm, ...)")
	f.StringVar(&o.Request, "request", "{}", "the request object, as JSON")
	f.BoolVar(&o.JSON, "json", false, "print every message of the request as a JSON line")
	_ = c.MarkFlagRequired("type")
	_ = c.MarkFlagRequired("action")
	return c
}

func runInvoke(ctx context.Context, o *InvokeOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f := invokev1.CheckRequest(o.Type, o.Action); f != nil {
		return exitErr(ExitUsage, "%s: give --type and --action (see 'fledge invoke --help')", f.Msg)
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(o.Request), &req); err != nil || req == nil {
		return &ExitError{Code: ExitUsage, Msg: "--request must be a JSON object (see 'fledge invoke --help')"}
	}
	e, err := openEnv(o.g)
	if err != nil {
		return err
	}
	defer e.close()
	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	entry := reg.Find(o.Plugin)
	if entry == nil {
		return exitErr(ExitUnknownCmd, "no plugin named %q is installed (see 'fledge plugins list')", o.Plugin)
	}
	cwd, _ := os.Getwd()
	proj, err := project.Detect(cwd, o.g.Project)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	if _, err := e.openAudit(); err != nil {
		return err
	}
	b, err := e.Bind(entry, proj)
	if err != nil {
		return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	if b.Manifest.Plugin.Protocol != plugin.ProtocolInvoke {
		return exitErr(ExitUsage, "plugin %s speaks %s, not %s: 'fledge invoke' is for invoke-v1 plugins", entry.Name, protocolName(b.Manifest.Plugin.Protocol), plugin.ProtocolInvoke)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// On a terminal, plugin text is stripped of escape sequences (as everywhere).
	stderr, flush := pluginStderr(o.g.Streams.Err)
	defer flush()
	stdout, flushOut := pluginStderr(o.g.Streams.Out)
	defer flushOut()
	sess, f := invokev1.Start(ctx, invokev1.Options{Host: &tools.Host{Env: e.Env, Project: proj, Stderr: stderr}, Binding: b})
	if f != nil {
		return reasonExit(f.Code, f.Msg)
	}
	defer sess.Close()
	out := sess.Invoke(ctx, o.Type, o.Action, json.RawMessage(o.Request), func(ev invokev1.Event) error {
		return printEvent(stdout, stderr, ev, o.JSON)
	})
	switch {
	case out.Failure != nil:
		return reasonExit(out.Failure.Code, out.Failure.Msg)
	case out.PluginError != "":
		return &ExitError{Code: reason.ToolFailed, Msg: fmt.Sprintf("plugin %s: %s", entry.Name, out.PluginError)}
	}
	return nil
}

// reasonExit prints the reason code and exits with its documented status.
func reasonExit(code reason.Code, msg string) error {
	return &ExitError{Code: reason.ExitStatus(code), Msg: fmt.Sprintf("%s (reason: %s)", msg, code)}
}

func protocolName(p string) string {
	if p == "" {
		return "no protocol (legacy)"
	}
	return p
}

// printEvent writes one message of the request: chunks to stdout as they come.
func printEvent(out, errw io.Writer, ev invokev1.Event, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = out.Write(append(b, '\n'))
		return err
	}
	switch ev.Type {
	case invokev1.TypeResponse:
		var s string
		if json.Unmarshal(ev.Response, &s) == nil {
			_, err := fmt.Fprintln(out, s)
			return err
		}
		_, err := out.Write(append(append([]byte{}, ev.Response...), '\n'))
		return err
	case invokev1.TypeInfo:
		var body struct {
			Info string `json:"info"`
		}
		if json.Unmarshal(ev.Response, &body) == nil && body.Info != "" {
			fmt.Fprintf(errw, "info: %s\n", body.Info)
		}
	}
	return nil
}
