// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui/clip"
)

// The rest of MCP through serve --mcp: every MCP plugin's prompts (named
// plugin_<plugin>_<prompt>, as its tools), resources and resource templates (URIs wrapped
// as fledge:<plugin>/<uri>), completions, subscriptions, logging and progress.

// featureTimeout bounds a prompts/get, resources/read, completion or (un)subscribe passed
// to a plugin's server.
const featureTimeout = 60 * time.Second

// maxFeatureCalls bounds the prompts/get, resources/read, completions and subscriptions
// in flight to plugins at once (tool calls take turns of their own).
const maxFeatureCalls = 16

// errBusy: the client has maxFeatureCalls requests in flight already.
var errBusy = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("fledge has %d requests in flight to plugins already; try again", maxFeatureCalls)}

// promptRef is a prompt offered: its plugin and its own name there.
type promptRef struct{ plugin, name string }

// passOn is what Serve offers besides tools, kept in step with the plugins' listings.
type passOn struct {
	srv *mcpsdk.Server
	// prov is the MCP provider of the catalogue being served (nil: none yet).
	mu        sync.Mutex
	prov      *Provider
	prompts   map[string]promptRef // public name -> prompt
	offeredP  map[string]string    // public name -> definition offered
	offeredR  map[string]string    // wrapped URI -> definition offered
	offeredT  map[string]string    // wrapped template -> definition offered
	ambiguous map[string]bool
	warn      func(string)
	inFlight  chan struct{}
	// only, when not nil, are the plugins whose features are offered: serve --tools names
	// some tools, and only their plugins' prompts and resources go with them.
	only map[string]bool
}

// turn takes one of the maxFeatureCalls places (false: none free); done gives it back.
func (po *passOn) turn() bool {
	select {
	case po.inFlight <- struct{}{}:
		return true
	default:
		return false
	}
}

func (po *passOn) done() { <-po.inFlight }

func newPassOn(srv *mcpsdk.Server, warn func(string)) *passOn {
	return &passOn{srv: srv, prompts: map[string]promptRef{}, offeredP: map[string]string{},
		offeredR: map[string]string{}, offeredT: map[string]string{}, ambiguous: map[string]bool{}, warn: warn,
		inFlight: make(chan struct{}, maxFeatureCalls)}
}

// mcpProvider is the catalogue's MCP provider (nil when none is registered).
func mcpProvider(cat *tools.Catalogue) *Provider {
	p, _ := cat.Provider(plugin.ProtocolMCP).(*Provider)
	return p
}

// allowPrompt is the one place that decides whether a plugin's prompt is offered and may
// be got: not while its definition is quarantined (changed since it was approved). A
// per-name allow/deny policy of the catalogue applies here, to listing and get alike.
func allowPrompt(cat *tools.Catalogue, pluginName, prompt string) bool {
	return !cat.Held(pluginName, pinPrompt+prompt)
}

// allowTemplate: a resource template is offered unless its definition is quarantined.
func allowTemplate(cat *tools.Catalogue, pluginName, uriTemplate string) bool {
	return !cat.Held(pluginName, pinTemplate+uriTemplate)
}

// offer makes the offered prompts, resources and templates the running MCP servers'
// listings, as the catalogue vetted them (called with the catalogue's turn held).
func (po *passOn) offer(cat *tools.Catalogue) {
	prov := mcpProvider(cat)
	po.mu.Lock()
	po.prov = prov
	po.mu.Unlock()
	var live []*session
	if prov != nil {
		live = prov.live()
	}
	type pr struct {
		def *mcpsdk.Prompt
		ref promptRef
	}
	prompts := map[string][]pr{}
	resources := map[string]*mcpsdk.Resource{}
	templates := map[string]*mcpsdk.ResourceTemplate{}
	for _, s := range live {
		if po.only != nil && !po.only[s.name] {
			continue
		}
		f := s.features()
		for _, p := range f.prompts {
			if !allowPrompt(cat, s.name, p.Name) {
				continue
			}
			pub := tools.PublicName(s.name, p.Name)
			c := *p
			c.Name = pub
			prompts[pub] = append(prompts[pub], pr{&c, promptRef{s.name, p.Name}})
		}
		for _, r := range f.resources {
			c := *r
			c.URI = wrapURI(s.name, r.URI)
			resources[c.URI] = &c
		}
		for _, t := range f.templates {
			if !allowTemplate(cat, s.name, t.URITemplate) {
				continue
			}
			c := *t
			c.URITemplate = wrapURI(s.name, t.URITemplate)
			templates[c.URITemplate] = &c
		}
	}
	nowP := map[string]string{}
	refs := map[string]promptRef{}
	for pub, list := range prompts {
		if len(list) > 1 {
			// One public name, two plugins (a with b_c, a_b with c): neither is offered.
			if !po.ambiguous[pub] {
				po.ambiguous[pub] = true
				po.warn(fmt.Sprintf("prompt %s is offered by two plugins (%s, %s): neither is offered", pub, list[0].ref.plugin, list[1].ref.plugin))
			}
			continue
		}
		key := defKey(list[0].def)
		nowP[pub], refs[pub] = key, list[0].ref
		if po.offeredP[pub] != key {
			po.srv.AddPrompt(list[0].def, po.getPrompt)
		}
	}
	po.mu.Lock()
	po.prompts = refs
	po.mu.Unlock()
	po.offeredP = applyGone(po.offeredP, nowP, po.srv.RemovePrompts)

	nowR := map[string]string{}
	for uri, r := range resources {
		key := defKey(r)
		nowR[uri] = key
		if po.offeredR[uri] != key {
			po.srv.AddResource(r, po.readResource)
		}
	}
	po.offeredR = applyGone(po.offeredR, nowR, po.srv.RemoveResources)
	nowT := map[string]string{}
	for ut, t := range templates {
		key := defKey(t)
		nowT[ut] = key
		if po.offeredT[ut] != key {
			po.srv.AddResourceTemplate(t, po.readResource)
		}
	}
	po.offeredT = applyGone(po.offeredT, nowT, po.srv.RemoveResourceTemplates)
}

func defKey(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// applyGone removes what was offered and is no more, and returns now.
func applyGone(was, now map[string]string, remove func(...string)) map[string]string {
	var gone []string
	for k := range was {
		if _, ok := now[k]; !ok {
			gone = append(gone, k)
		}
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		remove(gone...)
	}
	return now
}

func (po *passOn) provider() *Provider {
	po.mu.Lock()
	defer po.mu.Unlock()
	return po.prov
}

// server is the running server of a plugin the client named.
func (po *passOn) server(pluginName string) (*session, error) {
	prov := po.provider()
	if prov == nil {
		return nil, errors.New("no MCP plugin is served")
	}
	s := prov.running(pluginName)
	if s == nil {
		return nil, fmt.Errorf("plugin %s has no running MCP server", pluginName)
	}
	return s, nil
}

// record puts one passed-on request on the plugin's record.
func record(s *session, method string, d map[string]any, start time.Time, res any, err error) {
	d["method"] = method
	d[audit.DetailDurationMS] = time.Since(start).Milliseconds()
	if err != nil {
		d["error"] = clip.Bytes(safeText(err.Error()), maxErrorText)
		s.rec.Record(audit.EventServerRequest, audit.Error, reason.ToolError, d, false)
		return
	}
	b, _ := json.Marshal(res)
	d["result_bytes"] = len(b)
	s.rec.Record(audit.EventServerRequest, audit.Allow, reason.OK, d, false)
}

// featureError is an error for the client: a server's own JSON-RPC error as it gave it
// (its message made plain), anything else as text.
func featureError(err error) error {
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return &jsonrpc.Error{Code: werr.Code, Message: clip.Bytes(safeText(werr.Message), maxErrorText)}
	}
	return err
}

func (po *passOn) getPrompt(ctx context.Context, req *mcpsdk.GetPromptRequest) (*mcpsdk.GetPromptResult, error) {
	if !po.turn() {
		return nil, errBusy
	}
	defer po.done()
	po.mu.Lock()
	ref, ok := po.prompts[req.Params.Name]
	po.mu.Unlock()
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", req.Params.Name)}
	}
	s, err := po.server(ref.plugin)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, featureTimeout)
	defer cancel()
	start := time.Now()
	res, err := s.cs.GetPrompt(cctx, &mcpsdk.GetPromptParams{Name: ref.name, Arguments: req.Params.Arguments})
	record(s, "prompts/get", map[string]any{"prompt": ref.name}, start, res, err)
	if err != nil {
		return nil, featureError(err)
	}
	for _, m := range res.Messages {
		if m != nil {
			m.Content = wrapContent(s.name, m.Content)
		}
	}
	return res, nil
}

// readResource reads a wrapped URI from its plugin's server; the contents' URIs come back
// wrapped.
func (po *passOn) readResource(ctx context.Context, req *mcpsdk.ReadResourceRequest) (*mcpsdk.ReadResourceResult, error) {
	if !po.turn() {
		return nil, errBusy
	}
	defer po.done()
	pluginName, orig, ok := unwrapURI(req.Params.URI)
	if !ok {
		return nil, mcpsdk.ResourceNotFoundError(req.Params.URI)
	}
	s, err := po.server(pluginName)
	if err != nil {
		return nil, mcpsdk.ResourceNotFoundError(req.Params.URI)
	}
	cctx, cancel := context.WithTimeout(ctx, featureTimeout)
	defer cancel()
	start := time.Now()
	res, err := s.cs.ReadResource(cctx, &mcpsdk.ReadResourceParams{URI: orig})
	if err == nil {
		if b, _ := json.Marshal(res); len(b) > maxResultBytes {
			err = fmt.Errorf("resource %s is %d bytes, over the %d fledge passes on", orig, len(b), maxResultBytes)
		}
	}
	record(s, "resources/read", map[string]any{"uri": clip.Bytes(orig, 512)}, start, res, err)
	if err != nil {
		return nil, featureError(err)
	}
	for _, c := range res.Contents {
		if c != nil && wrappable(s.name, c.URI, false) {
			c.URI = wrapURI(s.name, c.URI)
		} else if c != nil {
			c.URI = req.Params.URI
		}
	}
	return res, nil
}

func (po *passOn) subscribe(ctx context.Context, uri string, on bool) error {
	if !po.turn() {
		return errBusy
	}
	defer po.done()
	pluginName, orig, ok := unwrapURI(uri)
	if !ok {
		return mcpsdk.ResourceNotFoundError(uri)
	}
	s, err := po.server(pluginName)
	if err != nil {
		return err
	}
	if !s.caps().subscribe {
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("plugin %s's server does not take resource subscriptions", pluginName)}
	}
	cctx, cancel := context.WithTimeout(ctx, featureTimeout)
	defer cancel()
	start := time.Now()
	method := "resources/subscribe"
	if on {
		err = s.cs.Subscribe(cctx, &mcpsdk.SubscribeParams{URI: orig})
	} else {
		method = "resources/unsubscribe"
		err = s.cs.Unsubscribe(cctx, &mcpsdk.UnsubscribeParams{URI: orig})
	}
	record(s, method, map[string]any{"uri": clip.Bytes(orig, 512)}, start, struct{}{}, err)
	return featureError(err)
}

// complete passes a completion to the plugin whose prompt or resource template the
// reference names.
func (po *passOn) complete(ctx context.Context, req *mcpsdk.CompleteRequest) (*mcpsdk.CompleteResult, error) {
	if !po.turn() {
		return nil, errBusy
	}
	defer po.done()
	p := req.Params
	if p == nil || p.Ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete needs a ref"}
	}
	ref := *p.Ref
	var pluginName string
	switch ref.Type {
	case "ref/prompt":
		po.mu.Lock()
		pr, ok := po.prompts[ref.Name]
		po.mu.Unlock()
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %q", ref.Name)}
		}
		pluginName, ref.Name = pr.plugin, pr.name
	case "ref/resource":
		pl, orig, ok := unwrapURI(ref.URI)
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown resource template %q", ref.URI)}
		}
		pluginName, ref.URI = pl, orig
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown reference type %q", ref.Type)}
	}
	s, err := po.server(pluginName)
	if err != nil {
		return nil, err
	}
	if !s.caps().completions {
		return &mcpsdk.CompleteResult{Completion: mcpsdk.CompletionResultDetails{Values: []string{}}}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, featureTimeout)
	defer cancel()
	start := time.Now()
	res, err := s.cs.Complete(cctx, &mcpsdk.CompleteParams{Ref: &ref, Argument: p.Argument, Context: p.Context})
	record(s, "completion/complete", map[string]any{"ref": ref.Type, "name": ref.Name + ref.URI}, start, res, err)
	if err != nil {
		return nil, featureError(err)
	}
	return res, nil
}

// wrapContent is a server's content with its resource URIs wrapped (a resource link or an
// embedded resource read through fledge names the plugin it comes from).
func wrapContent(pluginName string, c mcpsdk.Content) mcpsdk.Content {
	switch v := c.(type) {
	case *mcpsdk.ResourceLink:
		if v != nil && wrappable(pluginName, v.URI, false) {
			w := *v
			w.URI = wrapURI(pluginName, v.URI)
			return &w
		}
	case *mcpsdk.EmbeddedResource:
		if v != nil && v.Resource != nil && wrappable(pluginName, v.Resource.URI, false) {
			w := *v
			r := *v.Resource
			r.URI = wrapURI(pluginName, r.URI)
			w.Resource = &r
			return &w
		}
	}
	return c
}

// passResult is a server's tool result as it gave it, resource URIs wrapped.
func passResult(pluginName string, res *mcpsdk.CallToolResult) *mcpsdk.CallToolResult {
	out := *res
	out.Content = make([]mcpsdk.Content, 0, len(res.Content))
	for _, c := range res.Content {
		out.Content = append(out.Content, wrapContent(pluginName, c))
	}
	return &out
}
