// SPDX-License-Identifier: MIT

package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/plugin"
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
	// Rebind, when set, is asked for the catalogue of the project the client names as its
	// first file:// root (nil, nil: keep the one given). The client knows which project it
	// means; fledge's working directory (an editor starts it from / or $HOME) does not.
	Rebind func(root string) (*tools.Catalogue, error)
	// NoRoots, when set, is warned once when the client offers no file:// root.
	NoRoots string
	// Run, when set, runs the server instead of stdio (in and out unused): serve_http.go
	// hands it to the Streamable HTTP handler as one client session's server.
	Run func(ctx context.Context, srv *mcpsdk.Server) error
}

// rootsWait bounds how long the server waits for the client's roots (and a tools/list or
// tools/call waits for them to be applied) before serving without them.
const rootsWait = 10 * time.Second

// Serve runs fledge as one MCP server on in/out (stdio) until the client goes away or ctx
// ends. Its tools are every tool of the catalogue (or the ones Only names); each call goes
// through the catalogue: argument check, the plugin's adapter, its sandbox and its audit
// records. Tool failures are tool results with isError, so the client's model sees them.
//
// No plugin starts before the client is initialized: then its roots (when it offers them)
// choose the project (Rebind), the tools are listed with that project, and only then are
// tools/list and tools/call answered.
func Serve(ctx context.Context, cat *tools.Catalogue, in io.ReadCloser, out io.WriteCloser, o ServeOptions) error {
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	// --tools names tools of installed plugins: checked before anything starts.
	var unknown []string
	for _, n := range o.Only {
		if n = strings.TrimSpace(n); n != "" && !cat.HasPluginFor(n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: %s (see 'fledge tools list')", ErrNoSuchTool, strings.Join(unknown, ", "))
	}

	serveCtx := ctx
	var srv *mcpsdk.Server
	var feats *passOn
	// mu: the current catalogue and the offered tools; listings that keep them up to date
	// take turns. Calls do not hold it: the catalogue locks its own lookups and gives a
	// provider that is not safe for concurrent calls one call at a time.
	var mu sync.Mutex
	cur := cat
	ready := make(chan struct{})
	var once sync.Once
	// kick: a provider said a plugin's tools changed (one listing due is enough).
	kick := make(chan struct{}, 1)
	// offered is what the client was given, by public name (description and schema): a
	// listing that differs is applied with AddTool/RemoveTools, and the SDK tells the
	// client (notifications/tools/list_changed).
	offered := map[string]string{}
	warned := map[string]bool{}
	warnOnce := func(msg string) {
		if !warned[msg] {
			warned[msg] = true
			warn(msg)
		}
	}
	handler := func(name string) mcpsdk.ToolHandler {
		return func(rctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
			// The SDK does not cancel a request in flight when the server is stopped (it
			// waits for it): the end of the serve (SIGINT, SIGTERM, SIGHUP, the client
			// gone) ends the call and its plugin's session too.
			ctx, cancel := context.WithCancel(rctx)
			defer cancel()
			defer context.AfterFunc(serveCtx, cancel)()
			args := map[string]any{}
			if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
				if err := json.Unmarshal(raw, &args); err != nil {
					return errorResult(fmt.Sprintf("arguments must be a JSON object: %v", err)), nil
				}
			}
			// Progress the client asked for comes back with its own token.
			if tok := req.Params.GetProgressToken(); tok != nil {
				ss := req.Session
				ctx = withProgress(ctx, func(pctx context.Context, progress, total float64, message string) {
					_ = ss.NotifyProgress(pctx, &mcpsdk.ProgressNotificationParams{ProgressToken: tok, Progress: progress, Total: total, Message: message})
				})
			}
			ctx, slot := withRawResult(ctx)
			// The catalogue takes its own lock for the lookup and none for the call: calls
			// of one client overlap, and their durable decisions share fsyncs.
			mu.Lock()
			c := cur
			mu.Unlock()
			t, res, err := c.Call(ctx, name, args)
			if err != nil {
				return errorResult(err.Error()), nil
			}
			// An MCP server's result as it gave it (structured content, images, audio,
			// links, embedded resources), unless a hook changed it.
			if slot.res != nil && t != nil && plugin.SpeaksMCP(t.Protocol) {
				if out, _ := resultOutput(slot.res); res.Success == !slot.res.IsError && bytes.Equal(out, res.Output) {
					return passResult(t.Plugin, slot.res), nil
				}
			}
			return toCallResult(res), nil
		}
	}
	// offer makes the server's tools the catalogue's listing (the ones Only names, when
	// it names some); a tool quarantined, gone with its plugin or no longer listed by its
	// server leaves, one approved or newly listed joins, one described anew is replaced.
	offer := func(list []tools.Tool) {
		exposed := list
		if len(o.Only) > 0 {
			only := map[string]bool{}
			for _, n := range o.Only {
				only[strings.TrimSpace(n)] = true
			}
			exposed = nil
			plugins := map[string]bool{}
			for _, t := range list {
				if only[t.Name] {
					exposed = append(exposed, t)
					plugins[t.Plugin] = true
				}
			}
			feats.only = plugins
		}
		now := map[string]string{}
		for _, t := range exposed {
			schema := tools.Schema(&t)
			if !objectSchema(schema) {
				warnOnce(fmt.Sprintf("tool %s is not offered: its input schema is not an object schema", t.Name))
				continue
			}
			def := &mcpsdk.Tool{Name: t.Name, Description: t.Description, InputSchema: schema}
			if plugin.SpeaksMCP(t.Protocol) {
				if mp := mcpProvider(cur); mp != nil {
					x := mp.toolExtra(t.Plugin, t.Tool)
					def.Title, def.Annotations = x.title, x.annotations
					if x.outputSchema != nil {
						def.OutputSchema = x.outputSchema
					}
				}
			}
			key := defKey(def)
			now[t.Name] = key
			if offered[t.Name] == key {
				continue
			}
			srv.AddTool(def, handler(t.Name))
		}
		var gone []string
		for n := range offered {
			if _, ok := now[n]; !ok {
				gone = append(gone, n)
			}
		}
		if len(gone) > 0 {
			sort.Strings(gone)
			srv.RemoveTools(gone...)
		}
		offered = now
	}
	setup := func(ss *mcpsdk.ServerSession) {
		once.Do(func() {
			defer close(ready)
			root := ""
			if ss != nil && o.Rebind != nil && offersRoots(ss) {
				rctx, cancel := context.WithTimeout(ctx, rootsWait)
				r, err := clientRoot(rctx, ss)
				cancel()
				if err != nil {
					warn(fmt.Sprintf("the MCP client offers roots but did not list them: %v", err))
				}
				root = r
			}
			switch {
			case root != "":
				c, err := o.Rebind(root)
				if err != nil {
					warn(fmt.Sprintf("the MCP client's root %s is not a project fledge can use (%v); plugins get no project", root, err))
				} else if c != nil {
					cur = c
				}
			case o.NoRoots != "":
				warn(o.NoRoots)
			}
			if mp := mcpProvider(cur); mp != nil && ss != nil {
				mp.setUpstream(&upstream{ss: ss, resourceUpdated: func(ctx context.Context, uri string) {
					_ = srv.ResourceUpdated(ctx, &mcpsdk.ResourceUpdatedNotificationParams{URI: uri})
				}})
			}
			// Watched before the first listing: a change during it is not missed.
			cur.Watch(func(string) {
				select {
				case kick <- struct{}{}:
				default: // a listing is already due
				}
			})
			list := cur.List(ctx)
			names := make([]string, 0, len(cur.Errors))
			for n := range cur.Errors {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				warnOnce(fmt.Sprintf("plugin %s: its tools are not offered: %s", n, cur.Errors[n]))
			}
			if _, err := selectTools(list, o.Only); err != nil {
				warn(err.Error())
			}
			offer(list)
			feats.offer(cur)
		})
	}
	// Once set up, the offered tools follow the catalogue: a plugin's tools that changed
	// on their own (a server's tools/list_changed, a server that ended) and approvals
	// (the pins on disk) make it list again.
	stop := make(chan struct{})
	var watching sync.WaitGroup
	defer func() {
		close(stop)
		watching.Wait()
		select {
		case <-ready:
			cur.Watch(nil)
			if mp := mcpProvider(cur); mp != nil {
				mp.setUpstream(nil)
			}
		default:
		}
	}()
	watching.Add(1)
	go func() {
		defer watching.Done()
		select {
		case <-ready:
		case <-stop:
			return
		}
		follow(ctx, cur, kick, stop, func() {
			mu.Lock()
			defer mu.Unlock()
			list := cur.List(ctx)
			names := make([]string, 0, len(cur.Errors))
			for n := range cur.Errors {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				warnOnce(fmt.Sprintf("plugin %s: its tools are not offered: %s", n, cur.Errors[n]))
			}
			offer(list)
			feats.offer(cur)
		})
	}()

	srv = mcpsdk.NewServer(&mcpsdk.Implementation{Name: "fledge", Version: core.FledgeVersion()}, &mcpsdk.ServerOptions{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Instructions: "Every tool runs in a plugin confined by fledge (sandbox, limits, audit log).",
		// The handshake-era protocol: a plugin's sampling, elicitation and log messages
		// reach the client as requests and notifications of fledge's own (handshakeVersion).
		SupportedProtocolVersions: handshakeVersions(),
		// Tools are added once the client is initialized; they exist from the start, and
		// the client is told whenever the offered set changes (a quarantine, an approval,
		// a server's own change, a server that ended and could not be started again).
		// Prompts, resources, completions and logging are the MCP plugins' (passOn), offered
		// whether or not one has any yet: a plugin's own list_changed may bring some.
		Capabilities: &mcpsdk.ServerCapabilities{
			Tools:       &mcpsdk.ToolCapabilities{ListChanged: true},
			Prompts:     &mcpsdk.PromptCapabilities{ListChanged: true},
			Resources:   &mcpsdk.ResourceCapabilities{ListChanged: true, Subscribe: true},
			Completions: &mcpsdk.CompletionCapabilities{},
			Logging:     &mcpsdk.LoggingCapabilities{},
		},
		InitializedHandler: func(_ context.Context, req *mcpsdk.InitializedRequest) {
			// Asking the client for its roots waits on the client: not on the loop that
			// reads its answer.
			go setup(req.Session)
		},
		CompletionHandler: func(ctx context.Context, req *mcpsdk.CompleteRequest) (*mcpsdk.CompleteResult, error) {
			return feats.complete(ctx, req)
		},
		SubscribeHandler: func(ctx context.Context, req *mcpsdk.SubscribeRequest) error {
			return feats.subscribe(ctx, req.Params.URI, true)
		},
		UnsubscribeHandler: func(ctx context.Context, req *mcpsdk.UnsubscribeRequest) error {
			return feats.subscribe(ctx, req.Params.URI, false)
		},
	})
	feats = newPassOn(srv, warn)
	srv.AddReceivingMiddleware(func(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
		return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
			switch method {
			case "tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list", "resources/templates/list",
				"resources/read", "resources/subscribe", "resources/unsubscribe", "completion/complete", "logging/setLevel":
				select {
				case <-ready:
				case <-time.After(rootsWait):
					setup(nil) // a client that never said initialized: serve without roots
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			switch method {
			case "resources/read":
				// Any URI of a plugin's server, listed or not (a tool's resource link):
				// the plugin named in it reads it.
				if r, ok := req.(*mcpsdk.ReadResourceRequest); ok && r.Params != nil {
					return feats.readResource(ctx, r)
				}
			case "logging/setLevel":
				res, err := next(ctx, method, req)
				if p, ok := req.GetParams().(*mcpsdk.SetLoggingLevelParams); err == nil && ok && p != nil {
					if mp := feats.provider(); mp != nil {
						mp.setLogLevel(ctx, p.Level)
					}
				}
				return res, err
			case "tools/call":
				// A tool the tool rules deny is not offered; a call to it all the same is
				// refused on record (tool_denied), not left to the SDK's "unknown tool".
				if p, ok := req.GetParams().(*mcpsdk.CallToolParamsRaw); ok {
					mu.Lock()
					err := cur.RefuseDenied(p.Name)
					mu.Unlock()
					if err != nil {
						return errorResult(err.Error()), nil
					}
				}
			}
			return next(ctx, method, req)
		}
	})
	var err error
	if o.Run != nil {
		err = o.Run(ctx, srv)
	} else {
		err = srv.Run(ctx, &mcpsdk.IOTransport{Reader: in, Writer: out, MaxLineLength: o.LineMax})
	}
	if errors.Is(err, io.EOF) || errors.Is(err, mcpsdk.ErrConnectionClosed) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Bounds of following the catalogue while serving.
const (
	// listGap is the least time between two listings a change asked for: a server that
	// says its tools changed over and over costs one listing a second at most.
	listGap = time.Second
	// pinsPoll is how often the pins directory is looked at for an approval.
	pinsPoll = 2 * time.Second
)

// follow runs list (the catalogue listed again, applied to the offered tools) whenever a
// provider says a plugin's tools changed (kick) or the pins on disk changed, at most once
// per listGap, until stop or ctx ends.
func follow(ctx context.Context, cat *tools.Catalogue, kick <-chan struct{}, stop <-chan struct{}, list func()) {
	tick := time.NewTicker(pinsPoll)
	defer tick.Stop()
	stamp := cat.PinsStamp()
	var last time.Time
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-kick:
		case <-tick.C:
			st := cat.PinsStamp()
			if st == stamp {
				continue
			}
			// A listing's own pin writes (a pending definition kept for review) change
			// the stamp too: they cost one listing more, which changes nothing.
			stamp = st
		}
		if wait := time.Until(last.Add(listGap)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		last = time.Now()
		list()
	}
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
