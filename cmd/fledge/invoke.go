// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/ui"
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
	if err := protocolhost.CheckInvoke(o.Type, o.Action); err != nil {
		return err
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(o.Request), &req); err != nil || req == nil {
		return &ExitError{Code: ExitUsage, Msg: "--request must be a JSON object (see 'fledge invoke --help')"}
	}
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	// On a terminal, plugin text is stripped of escape sequences (as everywhere).
	stderr, flush := ui.PluginStream(o.g.Streams.Err)
	defer flush()
	stdout, flushOut := ui.PluginStream(o.g.Streams.Out)
	defer flushOut()
	return h.Invoke(ctx, o.Plugin, o.Type, o.Action, json.RawMessage(o.Request), func(ev protocolhost.InvokeEvent) error {
		return printEvent(stdout, stderr, ev, o.JSON)
	})
}

// printEvent writes one message of the request: chunks to stdout as they come.
func printEvent(out, errw io.Writer, ev protocolhost.InvokeEvent, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = out.Write(append(b, '\n'))
		return err
	}
	switch ev.Type {
	case protocolhost.InvokeResponse:
		var s string
		if json.Unmarshal(ev.Response, &s) == nil {
			_, err := fmt.Fprintln(out, s)
			return err
		}
		_, err := out.Write(append(append([]byte{}, ev.Response...), '\n'))
		return err
	case protocolhost.InvokeInfo:
		var body struct {
			Info string `json:"info"`
		}
		if json.Unmarshal(ev.Response, &body) == nil && body.Info != "" {
			fmt.Fprintf(errw, "info: %s\n", body.Info)
		}
	}
	return nil
}
