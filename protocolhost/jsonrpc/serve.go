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

	// mu guards stopped; calls counts the tool calls being answered (Add under mu).
	mu      sync.Mutex
	stopped bool // Serve returned or is returning (ctx ended): answer nothing more
	calls   sync.WaitGroup
	// slots bounds the tool calls answered at once; a reader that finds none free stops
	// reading the host until one is.
	slots chan struct{}
}

// MaxConcurrentCalls bounds the tool/execute requests fledge serve answers at once. A host
// that pipelines more waits: fledge reads its next request once a call ends.
const MaxConcurrentCalls = 64

// shutdown ends every plugin once: shutdown, then SIGTERM, then SIGKILL.
func (s *server) shutdown() { s.closeOnce.Do(func() { _ = s.o.Catalogue.Close() }) }

// Serve answers the host's requests on In/Out until shutdown or the end of In; it shuts
// every plugin down before it returns.
//
// Tool calls overlap: a host that sends several tool/execute requests without waiting
// (pipelined, matching answers by id as JSON-RPC 2.0 does) has them answered as each ends,
// and their durable tool_call records share fsyncs (audit's group commit). Every other
// request (initialize, hook/..., shutdown, errors) waits for the calls before it to end and
// is answered in order, so a shutdown never overtakes a call.
//
// One goroutine at a time reads the host. On a tool call it hands the reading on to a new
// goroutine and answers the call itself: the request reaches its handler without a hand-off
// between goroutines, and the next request is read meanwhile. The caller's goroutine only
// waits: for the end of the session, or for ctx (a signal), which ends it even while the
// host sends nothing. Requests being answered when ctx ends are finished (their calls see
// ctx) before Serve returns, and none is started after.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
	s := &server{o: o, slots: make(chan struct{}, MaxConcurrentCalls)}
	defer s.shutdown()
	in, restore := pollableInput(o.In)
	defer restore()
	done := make(chan error, 1)
	go s.read(ctx, lines.NewReader(in, o.LineMax), done)
	select {
	case err := <-done:
		s.calls.Wait()
		return err
	case <-ctx.Done():
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.calls.Wait()
		// A request that ended the session while ctx ended reports as such.
		select {
		case err := <-done:
			return err
		default:
		}
		return ctx.Err()
	}
}

// read reads and answers the host's requests until one ends the session (sent on done), or
// it hands the reading on with a tool call.
func (s *server) read(ctx context.Context, lr *lines.Reader, done chan<- error) {
	for {
		line, n, err := lr.Next()
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return // Serve returned: nothing more is answered, errors included
		}
		var le *lines.TooLongError
		switch {
		case errors.As(err, &le):
			if !s.barrier() {
				return
			}
			s.replyError(nil, CodeParseError, fmt.Sprintf("Parse error: line %d is over the %d-byte limit", n, s.o.LineMax))
			s.mu.Unlock()
			continue
		case errors.Is(err, io.EOF):
			done <- nil
			return
		case err != nil:
			done <- err
			return
		}
		req, ok := s.parse(line)
		if !ok {
			continue
		}
		if req.method == "tool/execute" {
			// A free slot first: past the bound, the host is not read until a call ends.
			s.slots <- struct{}{}
			s.mu.Lock()
			if s.stopped {
				s.mu.Unlock()
				<-s.slots
				return
			}
			s.calls.Add(1)
			s.mu.Unlock()
			go s.read(ctx, lr, done)
			s.toolExecute(ctx, req.id, req.params)
			<-s.slots
			s.calls.Done()
			return
		}
		if !s.barrier() {
			return
		}
		finished := s.handle(ctx, req)
		s.mu.Unlock()
		if finished {
			done <- nil
			return
		}
	}
}

// barrier waits for every tool call in flight to end and returns holding s.mu (false, not
// holding it, once Serve stopped): what follows is answered after the calls before it.
func (s *server) barrier() bool {
	s.calls.Wait()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false
	}
	return true
}

// request is one parsed request: a nil id is a notification (no answer).
type request struct {
	method string
	id     json.RawMessage
	params json.RawMessage
}

// parse decodes one line; a line that is no request is answered with its error (false).
// It answers only errors, which need no order: they carry the id sent, or null.
func (s *server) parse(line []byte) (request, bool) {
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
		return request{}, false
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
		return request{}, false
	}
	return request{method: *req.Method, id: id, params: req.Params}, true
}

// handle answers one request other than a tool call; it reports whether the host asked
// fledge to shut down.
func (s *server) handle(ctx context.Context, req request) bool {
	method, id := req.method, req.id
	switch {
	case method == "initialize":
		s.reply(id, s.manifest(ctx))
	case method == "shutdown":
		s.shutdown()
		s.reply(id, map[string]any{"ok": true})
		return true
	case method == "tool/execute":
		s.toolExecute(ctx, id, req.params)
	case strings.HasPrefix(method, "hook/") && len(method) > len("hook/"):
		data, ok := objectParams(req.params)
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
	s.reply(id, toolAnswer{Result: out, Success: res.Success})
}

// toolAnswer is a tool/execute result, encoded without a map.
type toolAnswer struct {
	Result  json.RawMessage `json:"result"`
	Success bool            `json:"success"`
}

// rpcAnswer is an answer with a result, encoded without a map (the keys in the order a
// map's sorted keys had).
type rpcAnswer struct {
	ID      json.RawMessage `json:"id"`
	JSONRPC string          `json:"jsonrpc"`
	Result  any             `json:"result"`
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
	s.write(rpcAnswer{ID: id, JSONRPC: "2.0", Result: result})
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
