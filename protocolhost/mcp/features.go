// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui/clip"
)

// What an MCP server offers besides tools (prompts, resources, resource templates), and
// what it sends its client of its own accord (log messages, progress, resource updates,
// sampling and elicitation requests): kept per server, passed on by Serve.

// Bounds of what one server may list and send besides its tools.
const (
	maxPrompts      = 1024
	maxResources    = 4096
	maxTemplates    = 1024
	maxFeaturePages = 64
	// maxLogBytes bounds one log message's data as passed on.
	maxLogBytes = 16 << 10
	// logRate and logBurst: the log messages of one server passed on per second, and at
	// once; the rest are dropped and counted in one record per logRecordGap.
	logRate      = 20.0
	logBurst     = 50
	logRecordGap = 10 * time.Second
	// maxClientRequests bounds a server's sampling and elicitation requests in flight.
	maxClientRequests = 4
	// maxProgressMessage bounds a progress notification's message.
	maxProgressMessage = 1024
)

// Sentinels of the server-to-client requests fledge refuses.
var (
	errNotGranted = "plugin %s was not granted %s: fledge did not pass the request on (grant it with 'fledge plugins grant %s %s')"
	errNoClient   = "no MCP client to pass %s to: it reaches a client only through 'fledge serve --mcp'"
)

// upstream is the MCP client fledge serves (serve --mcp): where a plugin's own messages
// to its client go, named for the plugin.
type upstream struct {
	ss *mcpsdk.ServerSession
	// resourceUpdated passes on a server's notifications/resources/updated (its URI
	// already wrapped).
	resourceUpdated func(ctx context.Context, uri string)
}

// setUpstream makes Serve's client session the destination of every plugin's log
// messages, progress, resource updates, sampling and elicitation (nil: none).
func (p *Provider) setUpstream(u *upstream) { p.up.Store(u) }

// setLogLevel remembers the level the client asked for and sets it on every running
// server that logs (a server started later is told at its start).
func (p *Provider) setLogLevel(ctx context.Context, level mcpsdk.LoggingLevel) {
	p.logLevel.Store(&level)
	for _, s := range p.live() {
		s.setLogLevel(ctx, level)
	}
}

func (s *session) setLogLevel(ctx context.Context, level mcpsdk.LoggingLevel) {
	if !s.caps().logging {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = s.cs.SetLoggingLevel(lctx, &mcpsdk.SetLoggingLevelParams{Level: level})
}

// live are the running servers, by plugin name.
func (p *Provider) live() []*session {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*session, 0, len(p.sessions))
	for _, s := range p.sessions {
		if s.ready.Load() && !s.closing.Load() {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// running is one plugin's running server, if it runs.
func (p *Provider) running(name string) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[name]
	if s == nil || !s.ready.Load() || s.closing.Load() {
		return nil
	}
	return s
}

// serverCaps are the features a server said it offers at initialize.
type serverCaps struct {
	prompts, resources, subscribe, completions, logging bool
}

func (s *session) caps() serverCaps {
	if s.cs == nil {
		return serverCaps{}
	}
	r := s.cs.InitializeResult()
	if r == nil || r.Capabilities == nil {
		return serverCaps{}
	}
	c := r.Capabilities
	return serverCaps{
		prompts: c.Prompts != nil, resources: c.Resources != nil,
		subscribe:   c.Resources != nil && c.Resources.Subscribe,
		completions: c.Completions != nil, logging: c.Logging != nil,
	}
}

// features is what a server lists besides its tools, as last listed.
type features struct {
	prompts   []*mcpsdk.Prompt
	resources []*mcpsdk.Resource
	templates []*mcpsdk.ResourceTemplate
}

// listFeatures lists the server's prompts, resources and resource templates (those it
// offers), bounded; what cannot be listed is warned and left out.
func (s *session) listFeatures(ctx context.Context, warn func(string)) {
	c := s.caps()
	var f features
	if c.prompts {
		var params mcpsdk.ListPromptsParams
		seen := map[string]bool{}
		for page := 0; page < maxFeaturePages; page++ {
			res, err := s.cs.ListPrompts(ctx, &params)
			if err != nil {
				warn(fmt.Sprintf("plugin %s: its prompts could not be listed: %v", s.name, err))
				break
			}
			for _, pr := range res.Prompts {
				if pr == nil || !validToolName(pr.Name) || seen[pr.Name] || len(f.prompts) >= maxPrompts {
					continue
				}
				seen[pr.Name] = true
				f.prompts = append(f.prompts, cleanPrompt(pr))
			}
			if res.NextCursor == "" {
				break
			}
			params.Cursor = res.NextCursor
		}
	}
	if c.resources {
		var params mcpsdk.ListResourcesParams
		seen := map[string]bool{}
		for page := 0; page < maxFeaturePages; page++ {
			res, err := s.cs.ListResources(ctx, &params)
			if err != nil {
				warn(fmt.Sprintf("plugin %s: its resources could not be listed: %v", s.name, err))
				break
			}
			for _, r := range res.Resources {
				if r == nil || seen[r.URI] || len(f.resources) >= maxResources || !wrappable(s.name, r.URI, false) {
					continue
				}
				seen[r.URI] = true
				f.resources = append(f.resources, cleanResource(r))
			}
			if res.NextCursor == "" {
				break
			}
			params.Cursor = res.NextCursor
		}
		var tparams mcpsdk.ListResourceTemplatesParams
		tseen := map[string]bool{}
		for page := 0; page < maxFeaturePages; page++ {
			res, err := s.cs.ListResourceTemplates(ctx, &tparams)
			if err != nil {
				warn(fmt.Sprintf("plugin %s: its resource templates could not be listed: %v", s.name, err))
				break
			}
			for _, t := range res.ResourceTemplates {
				if t == nil || tseen[t.URITemplate] || len(f.templates) >= maxTemplates || !wrappable(s.name, t.URITemplate, true) {
					continue
				}
				tseen[t.URITemplate] = true
				f.templates = append(f.templates, cleanTemplate(t))
			}
			if res.NextCursor == "" {
				break
			}
			tparams.Cursor = res.NextCursor
		}
	}
	s.featMu.Lock()
	s.feat = f
	s.featMu.Unlock()
}

func (s *session) features() features {
	s.featMu.Lock()
	defer s.featMu.Unlock()
	return s.feat
}

// relistFeatures lists prompts and resources again after the server said they changed
// (one listing at a time; a notification during it makes one more), then tells a
// watcher.
func (p *Provider) relistFeatures(s *session, timeout time.Duration) {
	s.featAgain.Store(true)
	if !s.featRelisting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			for s.featAgain.Swap(false) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				s.listFeatures(ctx, p.warn)
				cancel()
			}
			s.featRelisting.Store(false)
			if !s.featAgain.Load() || !s.featRelisting.CompareAndSwap(false, true) {
				break
			}
		}
		p.host.Changed(s.name)
	}()
}

// Keys of prompt and resource-template definitions among a plugin's pins: a tool name
// never holds ':' (validToolName), so neither can take the other's pin.
const (
	pinPrompt   = "prompt:"
	pinTemplate = "resource-template:"
)

// Definitions are the prompts and resource templates of a plugin's server, as pins
// (tools.DefinitionsProvider): pinned with its tools, and held back the same way.
func (p *Provider) Definitions(ctx context.Context, b *core.Binding) []pins.Def {
	s, err := p.session(ctx, b)
	if err != nil {
		return nil
	}
	f := s.features()
	out := make([]pins.Def, 0, len(f.prompts)+len(f.templates))
	for _, pr := range f.prompts {
		out = append(out, pins.Def{Name: pinPrompt + pr.Name, Description: pr.Description, InputSchema: promptSchema(pr)})
	}
	for _, t := range f.templates {
		out = append(out, pins.Def{Name: pinTemplate + t.URITemplate, Description: t.Description})
	}
	return out
}

// promptSchema is a prompt's arguments as a JSON Schema (what its pin covers beside its
// description).
func promptSchema(pr *mcpsdk.Prompt) json.RawMessage {
	props := map[string]any{}
	required := []string{}
	for _, a := range pr.Arguments {
		if a == nil {
			continue
		}
		props[a.Name] = map[string]any{"type": "string", "description": a.Description}
		if a.Required {
			required = append(required, a.Name)
		}
	}
	sort.Strings(required)
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required})
	return b
}

func cleanPrompt(pr *mcpsdk.Prompt) *mcpsdk.Prompt {
	c := &mcpsdk.Prompt{Name: pr.Name, Title: clip.Bytes(safeText(pr.Title), 256), Description: safeText(clip.Bytes(pr.Description, maxDescription)), Icons: pr.Icons}
	for _, a := range pr.Arguments {
		if a == nil || !validToolName(a.Name) {
			continue
		}
		c.Arguments = append(c.Arguments, &mcpsdk.PromptArgument{Name: a.Name, Title: clip.Bytes(safeText(a.Title), 256),
			Description: clip.Bytes(safeText(a.Description), 1024), Required: a.Required})
	}
	return c
}

func cleanResource(r *mcpsdk.Resource) *mcpsdk.Resource {
	c := *r
	c.Name = clip.Bytes(safeText(r.Name), 256)
	c.Title = clip.Bytes(safeText(r.Title), 256)
	c.Description = safeText(clip.Bytes(r.Description, maxDescription))
	c.MIMEType = clip.Bytes(safeText(r.MIMEType), 128)
	return &c
}

func cleanTemplate(t *mcpsdk.ResourceTemplate) *mcpsdk.ResourceTemplate {
	c := *t
	c.Name = clip.Bytes(safeText(t.Name), 256)
	c.Title = clip.Bytes(safeText(t.Title), 256)
	c.Description = safeText(clip.Bytes(t.Description, maxDescription))
	c.MIMEType = clip.Bytes(safeText(t.MIMEType), 128)
	return &c
}

// maxDescription bounds a prompt's, resource's or template's description as passed on.
const maxDescription = 2048

// clientRequest is fledge's client's answer to a server's sampling/createMessage or
// elicitation/create: passed to the client fledge serves only when the plugin holds that
// grant, bounded, and on record either way (kind and size, never the text).
func (p *Provider) clientRequest(ctx context.Context, s *session, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
	kind, granted := "sampling", s.sampling
	if method == "elicitation/create" {
		kind, granted = "elicitation", s.elicitation
	}
	raw, _ := json.Marshal(req.GetParams())
	d := map[string]any{"kind": kind, "method": method, "request_bytes": len(raw)}
	refuse := func(rc reason.Code, msg string) (mcpsdk.Result, error) {
		d[audit.DetailMessage] = msg
		s.rec.Record(audit.EventClientRequest, audit.Deny, rc, d, true)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: msg}
	}
	if !granted {
		return refuse(reason.CapabilityNotGranted, fmt.Sprintf(errNotGranted, s.name, kind, s.name, kind))
	}
	up := p.up.Load()
	if up == nil || up.ss == nil {
		return refuse(reason.CapabilityNotAllowed, fmt.Sprintf(errNoClient, kind))
	}
	if int(s.clientReqs.Add(1)) > maxClientRequests {
		s.clientReqs.Add(-1)
		d[audit.DetailLimit] = "client_requests"
		d[audit.DetailLimitValue] = maxClientRequests
		return refuse(reason.LimitExceeded, fmt.Sprintf("plugin %s has %d %s requests in flight already", s.name, maxClientRequests, kind))
	}
	defer s.clientReqs.Add(-1)
	sync, err := s.rec.BeforeAct(audit.EventClientRequest, d)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "fledge cannot write its audit log"}
	}
	if sync != nil {
		if err := sync(); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "fledge cannot write its audit log"}
		}
	}
	// A person may take a while to answer; the server's own call timeout bounds it.
	cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	start := time.Now()
	var res mcpsdk.Result
	switch r := req.(type) {
	case *mcpsdk.CreateMessageWithToolsRequest:
		res, err = up.ss.CreateMessageWithTools(cctx, r.Params)
	case *mcpsdk.ElicitRequest:
		var er *mcpsdk.ElicitResult
		er, err = up.ss.Elicit(cctx, r.Params)
		if er != nil {
			d["action"] = er.Action
			res = er
		}
	default:
		err = fmt.Errorf("unexpected %s request", method)
	}
	out := map[string]any{"kind": kind, audit.DetailDurationMS: time.Since(start).Milliseconds()}
	if err != nil {
		out["error"] = clip.Bytes(safeText(err.Error()), maxErrorText)
		s.rec.Record(audit.EventClientResponse, audit.Error, reason.ToolError, out, true)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: clip.Bytes(safeText(err.Error()), maxErrorText)}
	}
	rb, _ := json.Marshal(res)
	out["response_bytes"] = len(rb)
	if a, ok := d["action"]; ok {
		out["action"] = a
	}
	s.rec.Record(audit.EventClientResponse, audit.Allow, reason.OK, out, true)
	return res, nil
}

// logLimit is a token bucket over one server's log messages passed on.
type logLimit struct {
	mu       sync.Mutex
	tokens   float64
	last     time.Time
	dropped  int
	recorded time.Time
}

// take reports whether one more message may pass, and how many were dropped since the
// last record when one is due now (0: none due).
func (l *logLimit) take(now time.Time) (ok bool, report int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens, l.last = logBurst, now
	}
	l.tokens += now.Sub(l.last).Seconds() * logRate
	if l.tokens > logBurst {
		l.tokens = logBurst
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		return true, 0
	}
	l.dropped++
	if now.Sub(l.recorded) >= logRecordGap {
		n := l.dropped
		l.dropped, l.recorded = 0, now
		return false, n
	}
	return false, 0
}

// flush returns the messages dropped since the last record (the session's end).
func (l *logLimit) flush() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.dropped
	l.dropped = 0
	return n
}

// recordDropped puts dropped log messages on record: the first one dropped at once, then
// the count at most once per logRecordGap and at the server's end.
func (s *session) recordDropped(n int) {
	s.rec.Record(audit.EventLimit, audit.Deny, reason.LimitExceeded, map[string]any{
		audit.DetailLimit: "log_messages", audit.DetailLimitValue: fmt.Sprintf("%g/s, %d at once", logRate, logBurst),
		"dropped": n, audit.DetailMessage: "log messages over the rate were dropped, not passed on",
	}, false)
}

// onLog passes a server's log message to the client fledge serves, named for the plugin
// (logger "<plugin>" or "<plugin>/<its logger>"), bounded in rate and size.
func (p *Provider) onLog(ctx context.Context, s *session, params *mcpsdk.LoggingMessageParams) {
	if params == nil {
		return
	}
	ok, dropped := s.logs.take(time.Now())
	if dropped > 0 {
		s.recordDropped(dropped)
	}
	if !ok {
		return
	}
	up := p.up.Load()
	if up == nil || up.ss == nil {
		return
	}
	logger := s.name
	if l := safeText(params.Logger); l != "" {
		logger += "/" + clip.Bytes(l, 128)
	}
	var data any = params.Data
	if str, isStr := params.Data.(string); isStr {
		data = safeText(clip.Bytes(str, maxLogBytes))
	} else if raw, err := json.Marshal(params.Data); err != nil || len(raw) > maxLogBytes {
		data = fmt.Sprintf("[fledge: a log message of %d bytes, over the %d passed on]", len(raw), maxLogBytes)
	}
	_ = up.ss.Log(ctx, &mcpsdk.LoggingMessageParams{Level: params.Level, Logger: logger, Data: data})
}

// progressSink receives a call's progress notifications (Serve: to its client, with the
// client's own token).
type progressSink func(ctx context.Context, progress, total float64, message string)

type progressKey struct{}

// withProgress makes the tool call made with ctx ask its server for progress, passed to
// sink.
func withProgress(ctx context.Context, sink progressSink) context.Context {
	return context.WithValue(ctx, progressKey{}, sink)
}

var progressSeq atomic.Uint64

// trackProgress gives a call a progress token of fledge's own (never the client's: two
// clients' tokens must not meet at one server) when ctx asks for progress.
func (s *session) trackProgress(ctx context.Context, params *mcpsdk.CallToolParams) func() {
	sink, _ := ctx.Value(progressKey{}).(progressSink)
	if sink == nil {
		return func() {}
	}
	tok := fmt.Sprintf("fledge-%d", progressSeq.Add(1))
	params.SetProgressToken(tok)
	s.progMu.Lock()
	if s.progress == nil {
		s.progress = map[string]progressSink{}
	}
	s.progress[tok] = sink
	s.progMu.Unlock()
	return func() {
		s.progMu.Lock()
		delete(s.progress, tok)
		s.progMu.Unlock()
	}
}

func (s *session) onProgress(ctx context.Context, params *mcpsdk.ProgressNotificationParams) {
	if params == nil {
		return
	}
	tok, _ := params.ProgressToken.(string)
	s.progMu.Lock()
	sink := s.progress[tok]
	s.progMu.Unlock()
	if sink != nil {
		sink(ctx, params.Progress, params.Total, clip.Bytes(safeText(params.Message), maxProgressMessage))
	}
}

// rawKey carries a slot for the MCP result of the call made with ctx: serve --mcp passes
// a server's result on as the server gave it (structured content, images, audio, links,
// embedded resources), not as the catalogue's JSON.
type rawKey struct{}

type rawSlot struct {
	res *mcpsdk.CallToolResult
}

func withRawResult(ctx context.Context) (context.Context, *rawSlot) {
	slot := &rawSlot{}
	return context.WithValue(ctx, rawKey{}, slot), slot
}

func putRaw(ctx context.Context, res *mcpsdk.CallToolResult) {
	if slot, ok := ctx.Value(rawKey{}).(*rawSlot); ok {
		slot.res = res
	}
}

// wrapURI is a server's resource URI as fledge's client sees it: fledge:<plugin>/<uri>.
// Plugin names hold no '/', so the first one after the scheme ends the name: the original
// URI is everything after it, unchanged (a template's variables too).
func wrapURI(plugin, uri string) string { return uriScheme + plugin + "/" + uri }

const uriScheme = "fledge:"

// unwrapURI is wrapURI's inverse ("", "", false for a URI fledge did not make).
func unwrapURI(uri string) (plugin, orig string, ok bool) {
	rest, ok := strings.CutPrefix(uri, uriScheme)
	if !ok {
		return "", "", false
	}
	plugin, orig, ok = strings.Cut(rest, "/")
	if !ok || plugin == "" || orig == "" {
		return "", "", false
	}
	return plugin, orig, true
}

// handshakeVersion is the newest MCP version of the initialize handshake, which fledge
// speaks on both sides. From 2026-07-28 on a server may no longer send its client a
// request of its own (sampling, elicitation) while serving one, nor log without a level
// in each request: passing those on needs the handshake-era protocol, which every SDK
// still speaks.
const handshakeVersion = "2025-11-25"

// handshakeVersions are the versions fledge's server negotiates (handshakeVersion and
// older).
func handshakeVersions() []string {
	var out []string
	for _, v := range mcpsdk.SupportedProtocolVersions() {
		if v <= handshakeVersion {
			out = append(out, v)
		}
	}
	return out
}

// maxURILen bounds a resource URI or template fledge passes on.
const maxURILen = 2048

// wrappable reports whether a server's resource URI (or URI template) can be passed on:
// bounded, no control characters, and its wrapped form a URI (template) the SDK accepts
// (it panics on one it cannot parse).
func wrappable(plugin, uri string, template bool) bool {
	if uri == "" || len(uri) > maxURILen || safeText(uri) != uri || strings.ContainsAny(uri, " \t\r\n") {
		return false
	}
	w := wrapURI(plugin, uri)
	if template {
		_, err := uritemplate.New(w)
		return err == nil
	}
	u, err := url.Parse(w)
	return err == nil && u.IsAbs()
}

// toolExtra is what a server says of a tool beyond its name, description and input schema,
// passed on by serve --mcp: its title, output schema and annotations.
type toolExtra struct {
	title        string
	outputSchema json.RawMessage
	annotations  *mcpsdk.ToolAnnotations
}

func extraOf(t *mcpsdk.Tool) toolExtra {
	e := toolExtra{title: clip.Bytes(safeText(t.Title), 256)}
	if t.OutputSchema != nil {
		// An object schema, bounded; anything else is not passed on (the structured
		// content still is).
		if raw, err := json.Marshal(t.OutputSchema); err == nil && len(raw) <= maxSchemaBytes {
			var m map[string]any
			if json.Unmarshal(raw, &m) == nil && m["type"] == "object" {
				e.outputSchema = raw
			}
		}
	}
	if a := t.Annotations; a != nil {
		c := *a
		c.Title = clip.Bytes(safeText(a.Title), 256)
		e.annotations = &c
	}
	return e
}

// toolExtra of one plugin's tool as last listed (zero when its server is not running).
func (p *Provider) toolExtra(pluginName, tool string) toolExtra {
	s := p.running(pluginName)
	if s == nil {
		return toolExtra{}
	}
	s.listMu.Lock()
	defer s.listMu.Unlock()
	return s.extra[tool]
}
