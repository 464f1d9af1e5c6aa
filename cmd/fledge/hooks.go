// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/protocolhost"
)

func newHooksCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "hooks",
		Short: "Run a hook event through the chain of jsonrpc-2.0 plugins subscribed to it",
	}
	c.AddCommand(newHooksRunCmd(g))
	return c
}

// HooksRunOptions is `fledge hooks run`.
type HooksRunOptions struct {
	g      *Globals
	Hook   string
	Params string
	JSON   bool
}

func newHooksRunCmd(g *Globals) *cobra.Command {
	o := &HooksRunOptions{g: g}
	c := &cobra.Command{
		Use:   "run <hook> --params JSON",
		Short: "Run one hook event in priority order and print the final data",
		Long: `Runs hook/<hook> on every installed jsonrpc-2.0 plugin subscribed to it, lower priority
first: "continue" passes the (possibly modified) data on, "stop" halts the chain (for
pre_tool_execute the plugin's result is the tool's result), "skip" discards a
post_user_input event, and context_enhance always accumulates. A plugin that does not
answer within 5 s, crashed or failed its handshake is skipped for the event and the chain
goes on.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Hook = args[0]
			if !cmd.Flags().Changed("params") {
				// An event is its data: a hook run without it is a mistake, not an empty event.
				return exitErr(ExitUsage, "hooks run %s: give the event's data with --params JSON ('{}' for none)", o.Hook)
			}
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringVar(&o.Params, "params", "", "the event's data as one JSON object (required; '{}' for none)")
	c.Flags().BoolVar(&o.JSON, "json", false, "print the whole chain (every plugin's step) as JSON")
	return c
}

func (o *HooksRunOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Hook == "" || strings.ContainsAny(o.Hook, " /\t\n") || len(o.Hook) > 64 {
		return exitErr(ExitUsage, "hook %q: a hook name such as post_user_input or context_enhance", o.Hook)
	}
	data, err := decodeObject(o.Params)
	if err != nil {
		return exitErr(ExitUsage, "--params: %v", err)
	}
	t, done, err := openTools(o.g)
	if err != nil {
		return err
	}
	defer done()
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	res, err := t.RunHook(ctx, o.Hook, data)
	if err != nil {
		return err
	}
	if o.JSON {
		if err := writeJSON(o.g.Streams.Out, res); err != nil {
			return err
		}
	} else {
		b, _ := json.Marshal(res.Combined())
		o.g.Streams.Out.Write(append(b, '\n'))
	}
	if ctx.Err() != nil {
		return &ExitError{Code: ExitInterrupted}
	}
	return nil
}
