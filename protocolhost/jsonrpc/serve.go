// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/fledgehq/fledge/protocol/lines"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui/clip"
)

// JSON-RPC 2.0 error codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
)

// ServeName is the name fledge gives itself as a plugin.
const ServeName = "fledge"

// ServeOptions make fledge one JSON-RPC 2.0 tool/hook plugin to an existing host.
type ServeOptions struct {
	In  io.Reader
	Out io.Writer
	// Catalogue is every installed tool (all protocols); Provider is its jsonrpc-2.0
	// provider, whose live plugins also run the hook chains; Bindings are the installed
	// jsonrpc-2.0 plugins (hook subscribers).
	Catalogue *tools.Catalogue
	Provider  *Provider
	Bindings  []*core.Binding
	Version   string
	Priority  int
	LineMax   int
	Warn      func(string)
}

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      json.RawMessage `json:"id"`
}

type server struct {
	o         ServeOptions
	outMu     sync.Mutex
	closeOnce sync.Once
}

// shutdown ends every plugin once: shutdown, then SIGTERM, then SIGKILL.
func (s *server) shutdown() { s.closeOnce.Do(func() { _ = s.o.Catalogue.Close() }) }

// Serve answers the host's requests on In/Out until shutdown or the end of In; it shuts
// every plugin down before it returns. Requests are answered in order.
//
// One goroutine reads the requests and answers each before it reads the next, so a request
// reaches its handler without a hand-off between goroutines. The caller's goroutine only
// waits: for the end of the session, or for ctx (a signal), which ends it even while the
// host sends nothing. A request being answered when ctx ends is finished (its calls see ctx)
// before Serve returns, and none is started after.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
	s := &server{o: o}
	defer s.shutdown()
	var (
		mu      sync.Mutex // held while a request is answered
		stopped bool       // Serve returned (ctx ended): answer nothing more
	)
	done := make(chan error, 1)
	go func() {
		lr := lines.NewReader(o.In, o.LineMax)
		for {
			line, n, err := lr.Next()
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			var le *lines.TooLongError
			switch {
			case errors.As(err, &le):
				s.replyError(nil, CodeParseError, fmt.Sprintf("Parse error: line %d is over the %d-byte limit", n, o.LineMax))
				mu.Unlock()
				continue
			case errors.Is(err, io.EOF):
				err = nil
				fallthrough
			case err != nil:
				mu.Unlock()
				done <- err
				return
			}
			finished := s.handle(ctx, line)
			mu.Unlock()
			if finished {
				done <- nil
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		mu.Lock()
		stopped = true
		mu.Unlock()
		// A request that ended the session while ctx ended reports as such.
		select {
		case err := <-done:
			return err
		default:
		}
		return ctx.Err()
	}
}

// handle answers one line; it reports whether the host asked fledge to shut down.
func (s *server) handle(ctx context.Context, line []byte) bool {
	var req rpcRequest
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			s.replyError(nil, CodeInvalidRequest, "Invalid Request: not a JSON-RPC request object")
		} else {
			s.replyError(nil, CodeParseError, "Parse error")
		}
		return false
	}
	id := req.ID
	if len(bytes.TrimSpace(id)) == 0 {
		id = nil // a notification: no answer
	}
	if req.JSONRPC != "2.0" || req.Method == nil {
		if id == nil {
			id = json.RawMessage("null")
		}
		s.replyError(id, CodeInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\" and method a string")
		return false
	}
	method := *req.Method
	switch {
	case method == "initialize":
		s.reply(id, s.manifest(ctx))
	case method == "shutdown":
		s.shutdown()
		s.reply(id, map[string]any{"ok": true})
		return true
	case method == "tool/execute":
		s.toolExecute(ctx, id, req.Params)
	case strings.HasPrefix(method, "hook/") && len(method) > len("hook/"):
		data, ok := objectParams(req.Params)
		if !ok {
			s.replyError(id, CodeInvalidParams, "Invalid params: a hook's params must be an object")
			return false
		}
		res := s.o.Provider.RunHook(ctx, s.o.Bindings, strings.TrimPrefix(method, "hook/"), data)
		s.reply(id, res.Combined())
	default:
		s.replyError(id, CodeMethodNotFound, "Method not found: "+clip.Bytes(method, 80))
	}
	return false
}

// manifest is fledge's own: the union of the plugins' hooks, every tool named
// <plugin>_<tool>.
func (s *server) manifest(ctx context.Context) map[string]any {
	ts := s.o.Catalogue.List(ctx)
	for name, why := range s.o.Catalogue.Errors {
		s.o.Warn(fmt.Sprintf("plugin %s: tools not offered: %s", name, why))
	}
	list := make([]map[string]any, 0, len(ts))
	for _, t := range ts {
		params := t.Params
		if params == nil {
			params = []tools.Param{}
		}
		list = append(list, map[string]any{
			"name": strings.TrimPrefix(t.Name, "plugin_"), "description": t.Description, "parameters": params,
		})
	}
	return map[string]any{
		"name": ServeName, "version": s.o.Version,
		"description": "fledge: every plugin behind it runs confined and audited",
		"hooks":       s.o.Provider.HookNames(s.o.Bindings), "tools": list, "priority": s.o.Priority,
	}
}

func (s *server) toolExecute(ctx context.Context, id json.RawMessage, params json.RawMessage) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(params, &p) != nil || p.Name == "" {
		s.replyError(id, CodeInvalidParams, "Invalid params: tool/execute takes {\"name\": string, \"arguments\": object}")
		return
	}
	args := map[string]any{}
	if len(p.Arguments) > 0 && string(p.Arguments) != "null" {
		a, ok := objectParams(p.Arguments)
		if !ok {
			s.replyError(id, CodeInvalidParams, "Invalid params: arguments must be an object")
			return
		}
		args = a
	}
	_, res, err := s.o.Catalogue.Call(ctx, "plugin_"+p.Name, args)
	switch {
	case errors.Is(err, tools.ErrUnknownTool):
		s.replyError(id, CodeInvalidParams, fmt.Sprintf("Invalid params: unknown tool %q", clip.Bytes(p.Name, 80)))
		return
	case errors.Is(err, tools.ErrBadArguments):
		s.replyError(id, CodeInvalidParams, "Invalid params: "+userText(err))
		return
	case err != nil:
		s.reply(id, map[string]any{"success": false, "result": "fledge: " + userText(err)})
		return
	}
	if res.Reason != reason.OK && res.Reason != "" {
		s.reply(id, map[string]any{"success": false, "result": fmt.Sprintf("fledge: %s (reason: %s)", res.Message, res.Reason)})
		return
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage(`""`)
	}
	s.reply(id, map[string]any{"success": res.Success, "result": out})
}

// userText is an error as the host may show it: one line, bounded.
func userText(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(msg) > 1000 {
		msg = msg[:1000] + "..."
	}
	return msg
}

func objectParams(raw json.RawMessage) (map[string]any, bool) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return map[string]any{}, true
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

func (s *server) reply(id json.RawMessage, result any) {
	if id == nil {
		return
	}
	s.write(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (s *server) replyError(id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	s.write(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
}

func (s *server) write(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		s.o.Warn(fmt.Sprintf("cannot encode an answer: %v", err))
		return
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_, _ = s.o.Out.Write(buf.Bytes())
}
