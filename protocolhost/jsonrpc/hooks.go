// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui/clip"
)

// Hook actions of JSON-RPC 2.0 tool/hook plugins.
const (
	ActionContinue = "continue"
	ActionStop     = "stop"
	ActionSkip     = "skip"
)

// The spec's hooks with special rules.
const (
	HookPostUserInput  = "post_user_input"
	HookContextEnhance = "context_enhance"
	HookPreToolExecute = "pre_tool_execute"
)

// HookStep is what one plugin of a chain did.
type HookStep struct {
	Plugin     string      `json:"plugin"`
	Priority   int         `json:"priority"`
	Action     string      `json:"action,omitempty"` // what it answered ("" when it did not)
	Reason     reason.Code `json:"reason"`           // ok, or why it was skipped
	Message    string      `json:"message,omitempty"`
	DurationMS int64       `json:"duration_ms"`
}

// HookResult is the outcome of one hook chain.
type HookResult struct {
	Hook   string         `json:"hook"`
	Action string         `json:"action"` // continue, stop or skip
	Data   map[string]any `json:"data"`
	// Result is the tool result a plugin gave with `stop` from pre_tool_execute.
	Result json.RawMessage `json:"result,omitempty"`
	Steps  []HookStep      `json:"plugins"`
}

// Combined is the chain's answer in the hook's own response shape: the action with the
// (modified) data, and the tool result after a pre_tool_execute stop.
func (r *HookResult) Combined() map[string]any {
	out := make(map[string]any, len(r.Data)+2)
	for k, v := range r.Data {
		out[k] = v
	}
	out["action"] = r.Action
	if r.Result != nil {
		out["result"] = r.Result
	}
	return out
}

type subscriber struct {
	b   *core.Binding
	man *Manifest
}

// Subscribers are the plugins among bindings subscribed to hook, in chain order: priority
// (lower first), then name. Plugins whose recorded handshake cannot be read are reported.
func (p *Provider) subscribers(bindings []*core.Binding, hook string) ([]subscriber, []HookStep) {
	var subs []subscriber
	var bad []HookStep
	for _, b := range bindings {
		m, err := Recorded(b)
		if err != nil {
			bad = append(bad, HookStep{Plugin: b.Entry.Name, Reason: reason.HandshakeFailed, Message: err.Error()})
			continue
		}
		if m.Subscribes(hook) {
			subs = append(subs, subscriber{b: b, man: m})
		}
	}
	sort.SliceStable(subs, func(i, j int) bool {
		if subs[i].man.Priority != subs[j].man.Priority {
			return subs[i].man.Priority < subs[j].man.Priority
		}
		return subs[i].b.Entry.Name < subs[j].b.Entry.Name
	})
	return subs, bad
}

// HookNames is the union of the hooks the plugins subscribed to, sorted.
func (p *Provider) HookNames(bindings []*core.Binding) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, b := range bindings {
		if p.Loadable(b.Entry.Name) != nil {
			continue
		}
		m, err := Recorded(b)
		if err != nil {
			continue
		}
		for _, h := range m.Hooks {
			if !seen[h] {
				seen[h] = true
				out = append(out, h)
			}
		}
	}
	sort.Strings(out)
	return out
}

// RunHook runs hook over every plugin of bindings subscribed to it, in priority order, with
// the spec's rules: continue passes the (possibly modified) data on; stop halts the chain
// (for pre_tool_execute the plugin's result is the tool's result); skip discards the event
// (post_user_input only; elsewhere it is a continue); for context_enhance stop and skip are
// ignored and the context always accumulates. A plugin that does not answer within
// HookTimeout, crashed, failed its handshake or answered nonsense is skipped for this event
// and the chain goes on. A plugin only changes keys the event carries, keeping their JSON
// type.
func (p *Provider) RunHook(ctx context.Context, bindings []*core.Binding, hook string, data map[string]any) *HookResult {
	res := &HookResult{Hook: hook, Action: ActionContinue, Data: copyMap(data), Steps: []HookStep{}}
	if _, ok := res.Data["dynamic_context"]; !ok && hook == HookContextEnhance {
		// The seed's context_enhance carries dynamic_context, and its own example reads it
		// as optional (.get("dynamic_context", "")): an event without it starts from the
		// empty context, so what the plugins add accumulates instead of being dropped as a
		// key the event does not carry.
		res.Data["dynamic_context"] = ""
	}
	subs, bad := p.subscribers(bindings, hook)
	res.Steps = append(res.Steps, bad...)
	for _, sub := range subs {
		step, answer := p.runOne(ctx, sub, hook, res.Data)
		if answer != nil {
			action := applyAnswer(hook, res, answer, &step)
			step.Action = action
			res.Steps = append(res.Steps, step)
			if action == ActionStop && hook != HookContextEnhance {
				res.Action = ActionStop
				if hook == HookPreToolExecute {
					if r, ok := answer["result"]; ok {
						res.Result = r
					} else {
						res.Result = json.RawMessage(`""`)
					}
				}
				break
			}
			if action == ActionSkip && hook == HookPostUserInput {
				res.Action = ActionSkip
				break
			}
			continue
		}
		res.Steps = append(res.Steps, step)
		if ctx.Err() != nil {
			break
		}
	}
	return res
}

// runOne calls one plugin's hook: the answer object, or nil with the step saying why not.
func (p *Provider) runOne(ctx context.Context, sub subscriber, hook string, data map[string]any) (HookStep, map[string]json.RawMessage) {
	name := sub.b.Entry.Name
	step := HookStep{Plugin: name, Priority: sub.man.Priority, Reason: reason.OK}
	start := time.Now()
	done := func(err error) (HookStep, map[string]json.RawMessage) {
		step.Reason, step.Message = ReasonOf(err), err.Error()
		step.DurationMS = time.Since(start).Milliseconds()
		p.warn(fmt.Sprintf("hook %s: plugin %s skipped for this event: %v", hook, name, err))
		return step, nil
	}
	details := map[string]any{"hook": hook, "method": "hook/" + hook, "priority": sub.man.Priority}
	s, err := p.session(ctx, sub.b)
	if err != nil {
		p.refuse(sub.b, audit.EventHookCall, err, details)
		return done(err)
	}
	if !s.man.Subscribes(hook) {
		s.rec.Record(audit.EventHookCall, audit.Deny, reason.CapabilityNotDeclared, details, true)
		return done(fmt.Errorf("%w: plugin %s does not subscribe to %s", ErrMalformed, name, hook))
	}
	// Durable before the request is written (see Provider.Call).
	if err := s.rec.BeforeActNow(audit.EventHookCall, details); err != nil {
		return done(fmt.Errorf("%w: %w: %v", core.ErrLaunch, core.ErrAudit, err))
	}
	raw, err := s.conn.Call(ctx, "hook/"+hook, data, HookTimeout, nil)
	var answer map[string]json.RawMessage
	if err == nil {
		if jerr := json.Unmarshal(raw, &answer); jerr != nil || answer == nil {
			err = fmt.Errorf("%w: hook result must be a JSON object", ErrMalformed)
		}
	}
	rc, d := ReasonOf(err), audit.Allow
	if err != nil {
		d = audit.Error
	}
	out := map[string]any{"hook": hook, audit.DetailDurationMS: time.Since(start).Milliseconds(), "success": err == nil}
	if err == nil {
		var act string
		_ = json.Unmarshal(answer["action"], &act)
		out["action"] = act
	}
	s.rec.Record(audit.EventHookOutcome, d, rc, out, false)
	if err != nil {
		return done(err)
	}
	step.DurationMS = time.Since(start).Milliseconds()
	return step, answer
}

// applyAnswer merges a plugin's answer into the chain's data and returns its effective
// action.
func applyAnswer(hook string, res *HookResult, answer map[string]json.RawMessage, step *HookStep) string {
	action := ActionContinue
	if raw, ok := answer["action"]; ok {
		var a string
		if json.Unmarshal(raw, &a) != nil {
			step.Message = "action is not a string; treated as continue"
		} else {
			action = a
		}
	}
	switch action {
	case ActionContinue, ActionStop:
	case ActionSkip:
		if hook != HookPostUserInput {
			step.Message = "skip is only for post_user_input; treated as continue"
			action = ActionContinue
		}
	default:
		step.Message = fmt.Sprintf("unknown action %q; treated as continue", clip.Bytes(action, 80))
		action = ActionContinue
	}
	if hook == HookContextEnhance && action != ActionContinue {
		step.Message = action + " is ignored for context_enhance: context always accumulates"
		action = ActionContinue
	}
	var ignored []string
	for k, raw := range answer {
		if k == "action" {
			continue
		}
		old, known := res.Data[k]
		if !known {
			if !(k == "result" && hook == HookPreToolExecute) {
				ignored = append(ignored, k)
			}
			continue
		}
		var v any
		if json.Unmarshal(raw, &v) != nil {
			continue
		}
		if old != nil && tools.JSONType(old) != tools.JSONType(v) {
			ignored = append(ignored, k)
			continue
		}
		res.Data[k] = v
	}
	if len(ignored) > 0 && step.Message == "" {
		sort.Strings(ignored)
		step.Message = fmt.Sprintf("ignored keys the event does not carry or of another type: %v", ignored)
	}
	return action
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
