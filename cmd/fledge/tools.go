// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// ReasonExit is the exit status of a tool or hook call that failed for a reason of
// fledge's (protocolhost.ReasonExit).
var ReasonExit = protocolhost.ReasonExit

// openTools opens the host and its tool catalogue; close ends both.
func openTools(g *Globals) (*protocolhost.ToolSet, func(), error) {
	h, err := g.openHost()
	if err != nil {
		return nil, nil, err
	}
	t, err := h.OpenTools()
	if err != nil {
		h.Close()
		return nil, nil, err
	}
	return t, func() { t.Close(); h.Close() }, nil
}

func newToolsCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "tools",
		Short: "List and call the tools installed plugins offer (plugin_<plugin>_<tool>)",
	}
	c.AddCommand(newToolsListCmd(g), newToolsCallCmd(g))
	return c
}

// ToolsListOptions is `fledge tools list`.
type ToolsListOptions struct {
	g    *Globals
	JSON bool
}

func newToolsListCmd(g *Globals) *cobra.Command {
	o := &ToolsListOptions{g: g}
	c := &cobra.Command{
		Use:   "list",
		Short: "List every tool with its parameters (no plugin is started)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Run(cmd.Context()) },
	}
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	return c
}

func (o *ToolsListOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	t, done, err := openTools(o.g)
	if err != nil {
		return err
	}
	defer done()
	list := t.Catalogue.List(ctx)
	names := make([]string, 0, len(t.Catalogue.Errors))
	for n := range t.Catalogue.Errors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(o.g.Streams.Err, "fledge: warning: plugin %s: tools not listed: %s\n", n, ui.Sanitize(t.Catalogue.Errors[n]))
	}
	if o.JSON {
		if list == nil {
			list = []tools.Tool{}
		}
		for i := range list {
			if list[i].Params == nil {
				list[i].Params = []tools.Param{}
			}
		}
		return writeJSON(o.g.Streams.Out, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(o.g.Streams.Out, "no tools installed")
		return nil
	}
	tw := tabwriter.NewWriter(o.g.Streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tPLUGIN\tPARAMETERS\tDESCRIPTION")
	for _, tl := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", tl.Name, tl.Plugin, strings.TrimSuffix(strings.TrimPrefix(tools.ParamsText(tl.Params), " ("), ")"), tl.Description)
		for _, p := range tl.Params {
			req := "optional"
			if p.Required {
				req = "required"
			}
			fmt.Fprintf(tw, "\t\t  %s (%s, %s)\t%s\n", p.Name, orAny(p.Type), req, p.Description)
		}
	}
	return tw.Flush()
}

func orAny(t string) string {
	if t == "" {
		return "any"
	}
	return t
}

// ToolsCallOptions is `fledge tools call`.
type ToolsCallOptions struct {
	g       *Globals
	Tool    string
	Params  string
	Pairs   []string
	JSON    bool
	Timeout string
}

func newToolsCallCmd(g *Globals) *cobra.Command {
	o := &ToolsCallOptions{g: g}
	c := &cobra.Command{
		Use:   "call <tool> [--params JSON | name=value ...]",
		Short: "Call one tool: exit 0 on success, 1 when the tool says it failed",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Tool, o.Pairs = args[0], args[1:]
			return o.Run(cmd.Context())
		},
	}
	c.Flags().StringVar(&o.Params, "params", "", "the arguments as one JSON object")
	c.Flags().BoolVar(&o.JSON, "json", false, "print the whole result as JSON")
	c.Flags().StringVar(&o.Timeout, "timeout", "", "how long the tool may take (e.g. 30s; default and maximum from policy)")
	c.Flags().BoolVar(&g.Trace, "trace", false, "record every path and network destination the plugin and its commands try outside their grants (kernel_denied records; slower)")
	return c
}

func (o *ToolsCallOptions) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	timeout, args, err := o.parseFlags()
	if err != nil {
		return err
	}
	t, done, err := openTools(o.g)
	if err != nil {
		return err
	}
	defer done()
	tool, b, err := t.Catalogue.Find(ctx, o.Tool)
	if err != nil {
		return o.findError(err)
	}
	if args == nil {
		if args, err = pairArgs(tool, o.Pairs); err != nil {
			t.Catalogue.Refuse(b, tool, map[string]any{}, err)
			return exitErr(ExitUsage, "%v", err)
		}
	}
	// Checked before anything starts: a usage error never starts a plugin.
	if err := tools.Check(tool, args); err != nil {
		t.Catalogue.Refuse(b, tool, args, err)
		return exitErr(ExitUsage, "%v (see 'fledge tools list')", err)
	}
	if timeout > 0 {
		if timeout, err = o.policyTimeout(t, timeout); err != nil {
			return err
		}
	}
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	_, res, err := t.Call(ctx, o.Tool, args, timeout)
	if err != nil {
		if errors.Is(err, tools.ErrBadArguments) {
			return exitErr(ExitUsage, "%v", err)
		}
		return exitErr(ExitCannotRun, "%v", err)
	}
	return o.report(tool, res)
}

// parseFlags reads --timeout and --params; it runs before the host opens, so a usage error
// opens nothing. args is nil when the arguments come as name=value pairs, which need the
// tool's declared types.
func (o *ToolsCallOptions) parseFlags() (time.Duration, map[string]any, error) {
	if o.Params != "" && len(o.Pairs) > 0 {
		return 0, nil, exitErr(ExitUsage, "give the arguments either as --params JSON or as name=value pairs, not both")
	}
	var timeout time.Duration
	if o.Timeout != "" {
		d, err := time.ParseDuration(o.Timeout)
		if err != nil || d <= 0 {
			return 0, nil, exitErr(ExitUsage, "--timeout %q: a positive duration such as 30s", o.Timeout)
		}
		timeout = d
	}
	var args map[string]any
	if o.Params != "" {
		m, err := decodeObject(o.Params)
		if err != nil {
			return 0, nil, exitErr(ExitUsage, "--params: %v", err)
		}
		args = m
	}
	return timeout, args, nil
}

// findError turns a failure to find the tool into its exit status.
func (o *ToolsCallOptions) findError(err error) error {
	if errors.Is(err, tools.ErrUnknownTool) {
		return exitErr(ExitUnknownCmd, "%v", err)
	}
	// Listing the tools ran the plugin (a runtime-v1 handshake without [[tools]]): its
	// failure has a reason, and the reason its exit status, as for a failed call.
	var f *reason.Failure
	if errors.As(err, &f) {
		if o.JSON {
			_ = writeJSON(o.g.Streams.Out, map[string]any{
				"tool": o.Tool, "success": false, "result": nil, "reason": f.Code, "message": f.Msg,
			})
		}
		return &ExitError{Code: ReasonExit(f.Code), Msg: fmt.Sprintf("tool %s: %s (reason: %s)", o.Tool, f.Msg, f.Code)}
	}
	return exitErr(ExitCannotRun, "%v", err)
}

// policyTimeout holds the requested --timeout to the policy maximum, warning when it cuts it.
func (o *ToolsCallOptions) policyTimeout(t *protocolhost.ToolSet, timeout time.Duration) (time.Duration, error) {
	d, clamped, err := t.CallTimeout(timeout)
	if err != nil {
		return 0, exitErr(ExitUsage, "--timeout: %v", err)
	}
	if clamped {
		fmt.Fprintf(o.g.Streams.Err, "fledge: warning: --timeout %s is over the policy maximum; using %s\n", o.Timeout, d)
	}
	return d, nil
}

// report prints the call's result (JSON, or the plugin's text) and turns it into the exit status.
func (o *ToolsCallOptions) report(tool *tools.Tool, res *tools.Result) error {
	if res.Reason == "" {
		res.Reason = reason.OK
	}
	if o.JSON {
		if res.Output == nil {
			res.Output = json.RawMessage("null")
		}
		_ = writeJSON(o.g.Streams.Out, map[string]any{
			"tool": tool.Name, "success": res.Success, "result": res.Output, "reason": res.Reason, "message": res.Message,
		})
	} else if res.Reason == reason.OK && (res.Success || res.Message == "") {
		// The result is the plugin's text: sanitised on a terminal, like all plugin output.
		out, flush := ui.PluginStream(o.g.Streams.Out)
		printResult(out, res.Output)
		flush()
	}
	switch {
	case res.Reason != reason.OK:
		code := ReasonExit(res.Reason)
		return &ExitError{Code: code, Msg: fmt.Sprintf("tool %s: %s (reason: %s)", tool.Name, res.Message, res.Reason)}
	case !res.Success && res.Message != "" && !o.JSON:
		// The tool's own failure in its words (a runtime-v1 error reply: "code: message"),
		// not the JSON object it came in.
		return &ExitError{Code: ExitToolFalse, Msg: fmt.Sprintf("tool %s: %s", tool.Name, res.Message)}
	case !res.Success:
		return &ExitError{Code: ExitToolFalse}
	}
	return nil
}

// printResult prints a string result as text, anything else as JSON.
func printResult(w io.Writer, out json.RawMessage) {
	var s string
	if json.Unmarshal(out, &s) == nil {
		fmt.Fprintln(w, strings.TrimRight(s, "\n"))
		return
	}
	fmt.Fprintln(w, string(out))
}

func decodeObject(s string) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return m, nil
}

// pairArgs turns name=value pairs into arguments, each value read as its declared type.
func pairArgs(t *tools.Tool, pairs []string) (map[string]any, error) {
	types := map[string]string{}
	for _, p := range t.Params {
		types[p.Name] = strings.ToLower(p.Type)
	}
	args := map[string]any{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q: arguments are name=value (or --params JSON)", tools.ErrBadArguments, kv)
		}
		if _, dup := args[k]; dup {
			return nil, fmt.Errorf("%w: %s given twice", tools.ErrBadArguments, k)
		}
		typ, known := types[k]
		if !known {
			return nil, fmt.Errorf("%w: %s: unknown parameter %q", tools.ErrBadArguments, t.Name, k)
		}
		val, err := typedValue(typ, v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: parameter %q: %v", tools.ErrBadArguments, t.Name, k, err)
		}
		args[k] = val
	}
	return args, nil
}

func typedValue(typ, v string) (any, error) {
	switch typ {
	case "string":
		return v, nil
	case "number", "float":
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", v)
		}
		return f, nil
	case "integer", "int":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", v)
		}
		return float64(n), nil
	case "boolean", "bool":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", v)
		}
		return b, nil
	case "object", "array":
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			return nil, fmt.Errorf("not JSON: %v", err)
		}
		return x, nil
	}
	// Untyped: JSON if it parses as such, else the text.
	var x any
	if json.Unmarshal([]byte(v), &x) == nil {
		return x, nil
	}
	return v, nil
}
