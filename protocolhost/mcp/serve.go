package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
)

// ErrNoSuchTool: --tools names a tool the catalogue does not have.
var ErrNoSuchTool = errors.New("no such tool")

// ServeOptions configure Serve.
type ServeOptions struct {
	// Only, when not empty, is the set of public tool names to expose (--tools a,b).
	Only []string
	// LineMax bounds one line from the client (policy's line_max).
	LineMax int
	// Warn receives what the user should know (plugins whose tools could not be listed).
	Warn func(string)
}

// Serve runs fledge as one MCP server on in/out (stdio) until the client goes away or ctx
// ends. Its tools are every tool of the catalogue (or the ones Only names); each call goes
// through the catalogue: argument check, the plugin's adapter, its sandbox and its audit
// records. Tool failures are tool results with isError, so the client's model sees them.
func Serve(ctx context.Context, cat *tools.Catalogue, in io.ReadCloser, out io.WriteCloser, o ServeOptions) error {
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	list := cat.List(ctx)
	names := make([]string, 0, len(cat.Errors))
	for n := range cat.Errors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		warn(fmt.Sprintf("plugin %s: its tools are not offered: %s", n, cat.Errors[n]))
	}
	exposed, err := selectTools(list, o.Only)
	if err != nil {
		return err
	}

	srv := mcpsdk.NewServer(&mcpsdk.Implementation{Name: "fledge", Version: core.FledgeVersion()}, &mcpsdk.ServerOptions{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Instructions: "Every tool runs in a plugin confined by fledge (sandbox, limits, audit log).",
	})
	// The catalogue and some adapters are not safe for concurrent use: calls take turns.
	var mu sync.Mutex
	for _, t := range exposed {
		schema := tools.Schema(&t)
		if !objectSchema(schema) {
			warn(fmt.Sprintf("tool %s is not offered: its input schema is not an object schema", t.Name))
			continue
		}
		srv.AddTool(&mcpsdk.Tool{Name: t.Name, Description: t.Description, InputSchema: schema},
			func(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
				args := map[string]any{}
				if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
					if err := json.Unmarshal(raw, &args); err != nil {
						return errorResult(fmt.Sprintf("arguments must be a JSON object: %v", err)), nil
					}
				}
				mu.Lock()
				defer mu.Unlock()
				_, res, err := cat.Call(ctx, t.Name, args)
				if err != nil {
					return errorResult(err.Error()), nil
				}
				return toCallResult(res), nil
			})
	}
	tr := &mcpsdk.IOTransport{Reader: in, Writer: out, MaxLineLength: o.LineMax}
	err = srv.Run(ctx, tr)
	if errors.Is(err, io.EOF) || errors.Is(err, mcpsdk.ErrConnectionClosed) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func selectTools(list []tools.Tool, only []string) ([]tools.Tool, error) {
	if len(only) == 0 {
		return list, nil
	}
	byName := map[string]tools.Tool{}
	for _, t := range list {
		byName[t.Name] = t
	}
	var out []tools.Tool
	var missing []string
	seen := map[string]bool{}
	for _, n := range only {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		t, ok := byName[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		out = append(out, t)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s (see 'fledge tools list')", ErrNoSuchTool, strings.Join(missing, ", "))
	}
	return out, nil
}

func objectSchema(raw json.RawMessage) bool {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return false
	}
	return m["type"] == "object"
}

func errorResult(msg string) *mcpsdk.CallToolResult {
	return &mcpsdk.CallToolResult{IsError: true, Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: msg}}}
}

// toCallResult is a catalogue result as MCP content: a string result is its text, any
// other JSON is given as text and as structured content.
func toCallResult(res *tools.Result) *mcpsdk.CallToolResult {
	if !res.Success {
		msg := res.Message
		if msg == "" {
			msg = "the tool failed"
		}
		if res.Reason != "" && res.Reason != "ok" {
			msg += " (reason: " + string(res.Reason) + ")"
		}
		r := errorResult(msg)
		if text := jsonText(res.Output); text != "" && text != res.Message {
			r.Content = append(r.Content, &mcpsdk.TextContent{Text: text})
		}
		return r
	}
	var s string
	if err := json.Unmarshal(res.Output, &s); err == nil {
		return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: s}}}
	}
	r := &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: string(res.Output)}}}
	var obj map[string]any
	if json.Unmarshal(res.Output, &obj) == nil {
		r.StructuredContent = obj
	}
	return r
}

func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
