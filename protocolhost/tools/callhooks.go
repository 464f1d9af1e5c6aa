// SPDX-License-Identifier: MIT

package tools

import (
	"context"
	"encoding/json"
	"reflect"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
)

// CallHooks run around the calls a catalogue makes (the JSON-RPC 2.0 tool/hook plugins'
// pre_tool_execute and post_tool_execute). PreCall may change the arguments (they are
// checked again) or stop the call: a non-nil Result is then the call's result and the tool
// is not run. PostCall may change the result.
type CallHooks interface {
	PreCall(ctx context.Context, t *Tool, args map[string]any) (map[string]any, *Result)
	PostCall(ctx context.Context, t *Tool, args map[string]any, res *Result) *Result
}

// callWithHooks is Call's run of one checked call: the hooks around it, the provider's call
// inside; a stopped call is a deny tool_call record with the hook's reason.
func (c *Catalogue) callWithHooks(ctx context.Context, p Provider, t *Tool, args map[string]any, run func(map[string]any) (*Result, error)) (*Result, error) {
	if c.Hooks == nil {
		return run(args)
	}
	changed, stop := c.Hooks.PreCall(ctx, t, args)
	if stop != nil {
		b, err := c.Binding(t.Plugin)
		if err == nil {
			d := CallDetails(*t, args, false)
			d["error"] = stop.Message
			c.recorder(b).Record(audit.EventToolCall, audit.Deny, reason.HookStopped, d, true)
		}
		return stop, nil
	}
	if changed != nil && !reflect.DeepEqual(changed, args) {
		if err := Check(t, changed); err != nil {
			if b, berr := c.Binding(t.Plugin); berr == nil {
				c.Refuse(b, t, changed, err)
			}
			return nil, err
		}
		args = changed
	}
	res, err := run(args)
	if err != nil || res == nil {
		return res, err
	}
	return c.Hooks.PostCall(ctx, t, args, res), nil
}

// ArgumentsText is a call's arguments as the hooks carry them: a JSON string.
func ArgumentsText(args map[string]any) string {
	b, err := json.Marshal(args)
	if err != nil {
		return "{}"
	}
	return string(b)
}
