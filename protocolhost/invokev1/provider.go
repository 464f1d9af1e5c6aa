// SPDX-License-Identifier: MIT

package invokev1

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

func init() {
	tools.Register(plugin.ProtocolInvoke, func(h *tools.Host) tools.Provider { return NewProvider(h, Limits{}) })
}

// Provider is invoke-v1's side of the tools catalogue: one long-lived session per plugin
// for the fledge invocation; a tool call is the request type "tool", action "invoke_tool",
// {tool_name, tool_parameters}.
type Provider struct {
	h   *tools.Host
	lim Limits

	mu       sync.Mutex
	sessions map[string]*Session
}

// NewProvider makes the provider of one fledge invocation.
func NewProvider(h *tools.Host, lim Limits) *Provider {
	return &Provider{h: h, lim: lim, sessions: map[string]*Session{}}
}

// Tools are the plugin's [[tools]] from plugin.toml.
func (p *Provider) Tools(_ context.Context, b *core.Binding) ([]tools.Tool, error) {
	var out []tools.Tool
	for _, d := range b.Manifest.Tools {
		if !plugin.ValidName(d.Name) {
			continue
		}
		t := tools.Tool{Name: tools.PublicName(b.Entry.Name, d.Name), Plugin: b.Entry.Name, Tool: d.Name,
			Protocol: plugin.ProtocolInvoke, Description: d.Description}
		for _, prm := range d.Parameters {
			t.Params = append(t.Params, tools.Param{Name: prm.Name, Type: prm.Type, Description: prm.Description, Required: prm.Required})
		}
		out = append(out, t)
	}
	return out, nil
}

// Session returns the plugin's running session, starting it if needed.
func (p *Provider) Session(ctx context.Context, b *core.Binding) (*Session, *Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sessions[b.Entry.Name]; s != nil && s.Alive() {
		return s, nil
	} else if s != nil {
		s.Close()
	}
	s, f := Start(ctx, Options{Host: p.h, Binding: b, Limits: p.lim})
	if f != nil {
		return nil, f
	}
	p.sessions[b.Entry.Name] = s
	return s, nil
}

// Call runs one tool; its chunks make the result (one chunk: itself; several: an array),
// bounded by policy's output cap.
func (p *Provider) Call(ctx context.Context, b *core.Binding, t tools.Tool, args map[string]any) (*tools.Result, error) {
	if args == nil {
		args = map[string]any{}
	}
	req, err := json.Marshal(map[string]any{"tool_name": t.Tool, "tool_parameters": args})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tools.ErrBadArguments, err)
	}
	s, f := p.Session(ctx, b)
	if f != nil {
		return &tools.Result{Success: false, Output: json.RawMessage("null"), Reason: f.Code, Message: f.Msg}, nil
	}
	limit := s.prof.Session.OutputCap
	var chunks []json.RawMessage
	size := 0
	errCap := errors.New("output cap")
	out := s.Invoke(ctx, "tool", "invoke_tool", req, func(ev Event) error {
		if ev.Type != TypeResponse {
			return nil
		}
		size += len(ev.Response)
		if limit > 0 && size > limit {
			return errCap
		}
		chunks = append(chunks, ev.Response)
		return nil
	})
	if out.Failure != nil {
		code, msg := out.Failure.Code, out.Failure.Msg
		if code == reason.Cancelled && size > limit && limit > 0 {
			code, msg = reason.LimitExceeded, fmt.Sprintf("the tool's output is larger than the %d bytes output cap", limit)
		}
		return &tools.Result{Success: false, Output: json.RawMessage("null"), Reason: code, Message: msg}, nil
	}
	if out.PluginError != "" {
		b, _ := json.Marshal(map[string]string{"error": out.PluginError})
		return &tools.Result{Success: false, Output: b, Reason: reason.OK, Message: "the tool failed: " + out.PluginError}, nil
	}
	var output json.RawMessage
	switch len(chunks) {
	case 0:
		output = json.RawMessage("null")
	case 1:
		output = chunks[0]
	default:
		var buf bytes.Buffer
		buf.WriteByte('[')
		for i, c := range chunks {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(c)
		}
		buf.WriteByte(']')
		output = buf.Bytes()
	}
	return &tools.Result{Success: true, Output: output, Reason: reason.OK}, nil
}

// Close ends every session's plugin.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, s := range p.sessions {
		s.Close()
		delete(p.sessions, n)
	}
	return nil
}
