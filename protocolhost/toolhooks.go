// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fledgehq/fledge/protocolhost/jsonrpc"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// Hook names around a tool call (the JSON-RPC 2.0 tool/hook plugins' spec).
const (
	hookPreTool  = jsonrpc.HookPreToolExecute
	hookPostTool = "post_tool_execute"
)

// toolHooks runs the installed jsonrpc-2.0 plugins subscribed to pre_tool_execute and
// post_tool_execute around every call `tools call` and `serve --mcp` make, whatever the
// tool's protocol: an audit or policy plugin written for that spec sees MCP tool calls
// too, and its stop refuses the call.
type toolHooks struct {
	t   *ToolSet
	cat *tools.Catalogue
}

func (h toolHooks) PreCall(ctx context.Context, t *tools.Tool, args map[string]any) (map[string]any, *tools.Result) {
	p, bindings := h.t.jsonrpcIn(h.cat)
	if p == nil || len(bindings) == 0 {
		return args, nil
	}
	res := p.RunHook(ctx, bindings, hookPreTool, map[string]any{"tool_name": t.Name, "arguments": tools.ArgumentsText(args)})
	if res.Action == jsonrpc.ActionStop {
		by := ""
		for _, s := range res.Steps {
			if s.Action == jsonrpc.ActionStop {
				by = s.Plugin
			}
		}
		why := hookText(res.Result)
		return nil, &tools.Result{Success: false, Reason: reason.HookStopped, Output: json.RawMessage("null"),
			Message: fmt.Sprintf("plugin %s stopped the call of %s: %s", by, t.Name, why)}
	}
	// A plugin may change the arguments (a string of JSON, as the event carries them).
	if s, ok := res.Data["arguments"].(string); ok {
		var changed map[string]any
		if json.Unmarshal([]byte(s), &changed) == nil && changed != nil {
			return changed, nil
		}
	}
	return args, nil
}

func (h toolHooks) PostCall(ctx context.Context, t *tools.Tool, args map[string]any, r *tools.Result) *tools.Result {
	p, bindings := h.t.jsonrpcIn(h.cat)
	if p == nil || len(bindings) == 0 {
		return r
	}
	text := hookText(r.Output)
	res := p.RunHook(ctx, bindings, hookPostTool, map[string]any{
		"tool_name": t.Name, "arguments": tools.ArgumentsText(args), "result": text, "success": r.Success,
	})
	if s, ok := res.Data["result"].(string); ok && s != text {
		out := *r
		out.Output, _ = json.Marshal(s)
		return &out
	}
	return r
}

// hookText is a JSON value as the hooks' string fields carry it: a string as itself,
// anything else as its JSON.
func hookText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
