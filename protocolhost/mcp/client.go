// SPDX-License-Identifier: MIT

// Package mcp is fledge's Model Context Protocol side, on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk):
//
//   - protocol = "mcp" plugins: an MCP server over stdio started confined by the session
//     core, with fledge as its MCP client; its tools join the tools catalogue as
//     plugin_<name>_<tool>, arguments are validated against their JSON Schema before
//     anything is sent, and every call is a decision record before and an outcome after;
//   - fledge-v1 commands that declare typed args, offered as tools (FledgeV1Provider);
//   - Serve: fledge as one MCP server whose tools are every tool of the catalogue.
//
// Importing the package registers both providers with package tools.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui"
	"github.com/fledgehq/fledge/ui/clip"
)

var (
	// ErrHandshake: the server did not complete initialize (or tools/list) in time or at all.
	ErrHandshake = errors.New("MCP server did not complete the handshake")
	// ErrServerGone: the server's session ended (it exited, or fledge ended it for a bound).
	ErrServerGone = errors.New("MCP server session ended")
	// ErrCallTimeout: a tool call did not answer within its timeout.
	ErrCallTimeout = errors.New("MCP tool call timed out")
)

// Bounds of what one server may list.
const (
	maxTools       = 1024
	maxToolPages   = 64
	maxToolNameLen = 128
	// maxSchemaBytes bounds one tool's input schema.
	maxSchemaBytes = 256 << 10
	// maxResultBytes bounds a tool result fledge passes on.
	maxResultBytes = 16 << 20
	// maxErrorText bounds a tool's own error text in its outcome record.
	maxErrorText = 1024
	// relistWait bounds how long a listing waits for one the server asked for.
	relistWait = 2 * time.Second
)

func init() {
	tools.Register(plugin.ProtocolMCP, func(h *tools.Host) tools.Provider { return NewProvider(h) })
}

// Provider runs the protocol = "mcp" plugins of one fledge invocation: one server process
// per plugin, started on first use and kept until Close.
type Provider struct {
	host *tools.Host

	mu       sync.Mutex
	sessions map[string]*session
	// up is the client fledge serves (serve --mcp), nil when none; logLevel the level it
	// asked for (told to every server that logs).
	up       atomic.Pointer[upstream]
	logLevel atomic.Pointer[mcpsdk.LoggingLevel]
	// quiet are the plugins whose server ended on its own and was announced (Host.Changed)
	// with no tool call answered since: another end is not announced, so a server that
	// dies at every start is started again only when a call asks for it, never in a loop.
	quiet map[string]bool
}

// NewProvider is the MCP provider for one fledge invocation.
func NewProvider(h *tools.Host) *Provider {
	return &Provider{host: h, sessions: map[string]*session{}, quiet: map[string]bool{}}
}

// session is one running MCP server.
type session struct {
	name string
	proc *core.Proc
	rec  *core.Recorder
	conn *lineConn
	cs   *mcpsdk.ClientSession
	// list and schemas are the server's tools as last listed (a tools/list_changed
	// notification lists them again); listMu guards them.
	listMu      sync.Mutex
	list        []tools.Tool
	schemas     map[string]*jsonschema.Resolved
	extra       map[string]toolExtra // title, output schema, annotations by tool
	relisting   atomic.Bool
	relistAgain atomic.Bool // a tools/list_changed came since the listing under way began
	ready       atomic.Bool // cs is set
	closing     atomic.Bool // fledge is ending it (its exit is no news)
	callTimeout time.Duration
	argValues   bool
	// sampling and elicitation: the plugin's grants of those client capabilities.
	sampling, elicitation bool
	clientReqs            atomic.Int32
	// feat is what the server lists besides tools (featMu); a prompts or resources
	// list_changed lists it again.
	featMu        sync.Mutex
	feat          features
	featRelisting atomic.Bool
	featAgain     atomic.Bool
	logs          logLimit
	progMu        sync.Mutex
	progress      map[string]progressSink

	closeOnce sync.Once
	exitMu    sync.Mutex
	exitNote  map[string]any
	// log is the server's stderr; userErr where its end is shown when the server failed.
	log     *core.PluginLog
	userErr io.Writer
	// remote is set for a protocol = "mcp-remote" plugin (remote.go): proc, conn and log
	// are nil then.
	remote *remoteState
}

func (p *Provider) stderr() io.Writer {
	if p.host.Stderr != nil {
		return p.host.Stderr
	}
	return io.Discard
}

func (p *Provider) warn(msg string) { fmt.Fprintf(p.stderr(), "fledge: warning: %s\n", msg) }

// session returns the plugin's running server, starting it when needed.
func (p *Provider) session(ctx context.Context, b *core.Binding) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.sessions[b.Entry.Name]; ok {
		select {
		case <-s.done():
			// The server ended (crash, bound): close it properly and start a fresh one.
			s.close("exited")
			delete(p.sessions, b.Entry.Name)
		default:
			return s, nil
		}
	}
	s, err := p.start(ctx, b)
	if err != nil {
		return nil, err
	}
	p.sessions[b.Entry.Name] = s
	return s, nil
}

func (p *Provider) start(ctx context.Context, b *core.Binding) (*session, error) {
	if b.Manifest.Plugin.Protocol == plugin.ProtocolMCPRemote {
		return p.startRemote(ctx, b)
	}
	env := p.host.Env
	if len(b.Manifest.Commands) == 0 {
		return nil, fmt.Errorf("plugin %s declares no [[commands]] to start its MCP server", b.Entry.Name)
	}
	cmd := b.Manifest.Commands[0]
	program, err := env.Program(b, cmd.Binary)
	if err != nil {
		return nil, err
	}
	log, err := env.Audit()
	if err != nil {
		return nil, err
	}
	rec := env.NewRecorder(log, b.Ref, p.warn)
	// Nobody is at a terminal to answer an MCP server.
	pluginEnv := b.PluginEnv(cmd.Name, true)
	// Its home is its data dir: a server writes its state there without flags of its own.
	maps.Copy(pluginEnv, policy.ServerHome(pluginEnv["FLEDGE_DATA_DIR"]))
	if b.Project != nil {
		pluginEnv["FLEDGE_PROJECT_ROOT"] = b.Project.Root
	}
	prof := env.Profile(b, os.Environ(), pluginEnv, nil)
	cwd := b.StartDir("", prof.Plugin.Access)
	lim := prof.Session
	callTimeout, terr := policy.CallTimeout(b.Manifest.Plugin.Timeout, lim)
	if terr != nil {
		p.warn(fmt.Sprintf("plugin %s: %v", b.Entry.Name, terr))
	}

	spec := prof.Plugin
	spec.Kind = sandbox.KindPlugin
	spec.Name = b.Entry.Name
	spec.Path = program
	spec.Args = []string{program}
	core.ImageRun(b, &spec) // an image plugin: its argv, inside its image
	// The server's stderr is no word to the user: its log, shown when it fails (and -v).
	errLog := env.OpenServerLog(b.Entry.Name, p.stderr())
	proc, err := core.Spawn(core.SpawnOptions{
		Sandbox: env.Sandbox, Spec: spec, Cwd: cwd, Pipes: true, Stderr: errLog, Recorder: rec,
		StartDetails: map[string]any{audit.DetailCommand: cmd.Name, "grants": b.Entry.Granted, "protocol": plugin.ProtocolMCP},
		Ladder:       core.Ladder{CancelGrace: lim.CancelGrace, KillAfter: lim.KillAfter},
		DrainTimeout: lim.DrainTimeout,
	})
	if err != nil {
		_ = errLog.Close()
		return nil, err
	}
	s := &session{
		name: b.Entry.Name, proc: proc, rec: rec, callTimeout: callTimeout, log: errLog, userErr: p.stderr(),
		argValues: env.Config.Audit.ToolArgumentValues,
		schemas:   map[string]*jsonschema.Resolved{},
		sampling:  b.Entry.Granted.Sampling, elicitation: b.Entry.Granted.Elicitation,
	}
	s.conn = newLineConn(proc.Stdout, proc.Stdin, connLimits{LineMax: lim.LineMax, Pending: lim.PendingRequests})
	// A server that exits ends the connection, so nothing waits on it; one that exits on
	// its own (not ended by fledge) may take its tools with it: a watcher is told.
	go func() {
		<-proc.Done()
		_ = s.conn.Close()
		if s.ready.Load() && !s.closing.Load() {
			p.exited(s)
		}
	}()

	caps := &mcpsdk.ClientCapabilities{}
	// A plugin that may read the project is offered roots, whether or not this run has a
	// project: a server may list tools only to a client that can list roots, and its tools
	// are pinned at their first listing (an install, often from no project), so every
	// listing is made under the same capabilities; a first use from an editor's project is
	// then no changed listing held back.
	if b.Entry.Granted.ReadsProject() {
		declareRoots(caps)
	}
	// Sampling and elicitation are offered as granted, at install as at every later start:
	// tools a server offers only to such a client are pinned with the rest.
	if b.Entry.Granted.Sampling {
		caps.Sampling = &mcpsdk.SamplingCapabilities{}
	}
	if b.Entry.Granted.Elicitation {
		caps.Elicitation = &mcpsdk.ElicitationCapabilities{Form: &mcpsdk.FormElicitationCapabilities{}}
	}
	// The project is the server's one root when there is one (a filesystem server needs no
	// arguments then); without one it has none. The sandbox still decides what it reaches.
	offerRoot := b.Project != nil && b.Entry.Granted.ReadsProject()
	client := p.newClient(s, b, lim.ExecTimeoutDefault, caps)
	if offerRoot {
		addRoot(client, fileURI(b.Project.Root), b.Project.Name)
	}
	var rootsAsked atomic.Bool
	rootsServed := make(chan struct{})
	var servedOnce sync.Once
	client.AddReceivingMiddleware(func(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
		return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
			if method != "roots/list" {
				return next(ctx, method, req)
			}
			rootsAsked.Store(true)
			defer servedOnce.Do(func() { close(rootsServed) })
			return next(ctx, method, req)
		}
	})
	// initialize and tools/list are bounded by policy's timeout_default.
	ictx, cancel := context.WithTimeout(ctx, lim.ExecTimeoutDefault)
	defer cancel()
	cs, err := client.Connect(ictx, connTransport{s.conn}, &mcpsdk.ClientSessionOptions{ProtocolVersion: handshakeVersion})
	if err != nil {
		err = s.explain(ictx, err, fmt.Sprintf("did not answer initialize within %s", lim.ExecTimeoutDefault))
		s.endStart(reason.HandshakeFailed, err)
		return nil, fmt.Errorf("%w: plugin %s: %w", ErrHandshake, b.Entry.Name, err)
	}
	s.cs = cs
	s.ready.Store(true)
	if err := s.listTools(ictx, b, p.warn); err != nil {
		err = s.explain(ictx, err, fmt.Sprintf("did not answer tools/list within %s", lim.ExecTimeoutDefault))
		s.endStart(reason.HandshakeFailed, err)
		return nil, fmt.Errorf("%w: plugin %s: %w", ErrHandshake, b.Entry.Name, err)
	}
	// Prompts, resources and templates: listed now (pinned with the tools), a failure
	// is a warning, not a failed start.
	s.listFeatures(ictx, p.warn)
	if lvl := p.logLevel.Load(); lvl != nil {
		s.setLogLevel(ictx, *lvl)
	}
	if offerRoot {
		// A server that uses roots asks for them when initialized and applies them on its
		// own time: a first tool call must not overtake that. Its roots/list request came
		// before its tools/list answer; a ping flushes our reader past it, then the answer
		// to it and one more round trip (bounded by the handshake's timeout).
		_ = cs.Ping(ictx, nil)
		if rootsAsked.Load() {
			select {
			case <-rootsServed:
				_ = cs.Ping(ictx, nil)
			case <-ictx.Done():
			}
		}
	}
	return s, nil
}

// newClient is fledge's MCP client of one plugin's server, local or remote: list changes
// followed (tools against their pins; prompts and resources offered anew), resource
// updates, log messages and progress passed on, and the server's sampling and elicitation
// requests passed on only as granted.
func (p *Provider) newClient(s *session, b *core.Binding, timeout time.Duration, caps *mcpsdk.ClientCapabilities) *mcpsdk.Client {
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "fledge", Version: core.FledgeVersion()}, &mcpsdk.ClientOptions{
		Capabilities: caps,
		// A server that says its tools changed is listed again (one listing at a time,
		// bounded); the catalogue checks the new definitions against their pins.
		ToolListChangedHandler: func(context.Context, *mcpsdk.ToolListChangedRequest) {
			if !s.ready.Load() {
				return
			}
			// A notification during a listing is not dropped: that listing may have been
			// answered before the change it announces, so it goes round once more.
			s.relistAgain.Store(true)
			if s.relisting.CompareAndSwap(false, true) {
				go p.relist(s, b, timeout)
			}
		},
		// Prompts and resources said to have changed are listed again; the watcher
		// (serve --mcp) offers the new listing, checked against the pins.
		PromptListChangedHandler: func(context.Context, *mcpsdk.PromptListChangedRequest) {
			if s.ready.Load() {
				p.relistFeatures(s, timeout)
			}
		},
		ResourceListChangedHandler: func(context.Context, *mcpsdk.ResourceListChangedRequest) {
			if s.ready.Load() {
				p.relistFeatures(s, timeout)
			}
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcpsdk.ResourceUpdatedNotificationRequest) {
			if up := p.up.Load(); up != nil && up.resourceUpdated != nil && req.Params != nil && wrappable(s.name, req.Params.URI, false) {
				up.resourceUpdated(ctx, wrapURI(s.name, req.Params.URI))
			}
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcpsdk.LoggingMessageRequest) {
			p.onLog(ctx, s, req.Params)
		},
		ProgressNotificationHandler: func(ctx context.Context, req *mcpsdk.ProgressNotificationClientRequest) {
			s.onProgress(ctx, req.Params)
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	// A server's sampling and elicitation requests: passed on only as granted, on record.
	client.AddReceivingMiddleware(func(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
		return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
			if method == "sampling/createMessage" || method == "elicitation/create" {
				return p.clientRequest(ctx, s, method, req)
			}
			return next(ctx, method, req)
		}
	})
	return client
}

// relist lists a server's tools again after its tools/list_changed, as long as more of
// them come, then tells a watcher (serve --mcp lists the catalogue again: the new
// definitions meet their pins at once, and its client hears of what changed).
func (p *Provider) relist(s *session, b *core.Binding, timeout time.Duration) {
	listed := false
	for {
		for s.relistAgain.Swap(false) {
			lctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := s.listTools(lctx, b, p.warn)
			cancel()
			if err != nil {
				p.warn(fmt.Sprintf("plugin %s: listing its changed tools failed: %v", b.Entry.Name, err))
				continue
			}
			listed = true
		}
		s.relisting.Store(false)
		// A notification that came after the last look saw a listing under way: unless
		// another goroutine took it up, this one goes round again.
		if !s.relistAgain.Load() || !s.relisting.CompareAndSwap(false, true) {
			break
		}
	}
	if listed {
		p.host.Changed(b.Entry.Name)
	}
}

// exited announces a server that ended on its own (once until a call is answered again:
// see quiet).
func (p *Provider) exited(s *session) {
	p.mu.Lock()
	announced := p.quiet[s.name]
	p.quiet[s.name] = true
	p.mu.Unlock()
	if !announced {
		p.host.Changed(s.name)
	}
}

// answered notes that a plugin's server answered a call (its next end is news again).
func (p *Provider) answered(s *session) {
	p.mu.Lock()
	delete(p.quiet, s.name)
	p.mu.Unlock()
}

// explain turns an SDK error into what happened: a bound fledge enforced, a timeout, or
// the server exiting.
func (s *session) explain(ctx context.Context, err error, timeoutMsg string) error {
	if cause := s.cause(); cause != nil {
		return cause
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, timeoutMsg)
	}
	if s.remote != nil {
		select {
		case <-s.remote.gone:
			return fmt.Errorf("%w: the remote session ended: %v", ErrServerGone, err)
		default:
		}
		return err
	}
	select {
	case <-s.proc.Done():
		code := -1
		if res, _ := s.proc.Wait(); res != nil {
			code = res.ExitCode
		}
		return fmt.Errorf("%w: the server exited (status %d)", ErrServerGone, code)
	default:
	}
	return err
}

// endStart ends a server that failed its handshake and records why.
func (s *session) endStart(rc reason.Code, err error) {
	s.exitMu.Lock()
	s.exitNote = map[string]any{"handshake_error": err.Error()}
	s.exitMu.Unlock()
	if errors.Is(err, context.DeadlineExceeded) || s.cause() != nil {
		// A bound ended the handshake (its timeout, a line, a flood): on record as such.
		s.rec.Record(audit.EventLimit, audit.Deny, rc, map[string]any{audit.DetailMessage: err.Error(), audit.DetailLimit: "handshake"}, false)
	}
	s.close(string(rc))
}

// close ends the server: the connection closes (EOF on its stdin), then the ladder if it
// does not leave by itself, and its plugin_exit record.
func (s *session) close(by string) {
	s.closeOnce.Do(func() {
		if s.remote != nil {
			s.closeRemote(by)
			return
		}
		s.closing.Store(true)
		// It failed when fledge ended it for a reason of its own, or when it ended before
		// fledge shut it down.
		failed := by != "shutdown" || s.conn.serverEnded.Load()
		select {
		case <-s.proc.Done():
			failed = true
		default:
		}
		if s.cs != nil {
			_ = s.cs.Close()
		}
		// EOF on its stdin is the server's cue (the ladder's first step); SIGTERM and
		// SIGKILL follow on policy's ladder if it does not leave.
		_ = s.conn.Close()
		s.proc.Stop(by, false, nil)
		if n := s.logs.flush(); n > 0 {
			s.recordDropped(n)
		}
		extra := map[string]any{"protocol": plugin.ProtocolMCP}
		s.exitMu.Lock()
		for k, v := range s.exitNote {
			extra[k] = v
		}
		s.exitMu.Unlock()
		if cause := s.conn.Cause(); cause != nil {
			extra["ended_by_fledge"] = cause.Error()
		}
		s.proc.Finish(extra)
		// Finish drained its stderr. A server fledge shut down did not fail: what it said
		// on its way out (an EPIPE trace) stays in its log.
		if failed {
			s.log.ShowTail(s.userErr)
		}
		_ = s.log.Close()
	})
}

func (s *session) listTools(ctx context.Context, b *core.Binding, warn func(string)) error {
	var params mcpsdk.ListToolsParams
	var list []tools.Tool
	schemas := map[string]*jsonschema.Resolved{}
	extra := map[string]toolExtra{}
	seen := map[string]bool{}
pages:
	for page := 0; page < maxToolPages; page++ {
		res, err := s.cs.ListTools(ctx, &params)
		if err != nil {
			return err
		}
		for _, t := range res.Tools {
			if len(list) >= maxTools {
				warn(fmt.Sprintf("plugin %s lists more than %d tools; the rest are ignored", b.Entry.Name, maxTools))
				break pages
			}
			if t == nil || !validToolName(t.Name) || seen[t.Name] {
				warn(fmt.Sprintf("plugin %s: tool %q ignored (empty, duplicate, too long or with characters fledge does not pass on)", b.Entry.Name, clip.Bytes(safeText(toolName(t)), 80)))
				continue
			}
			schema, resolved, err := inputSchema(t.InputSchema)
			if err != nil {
				warn(fmt.Sprintf("plugin %s: tool %q ignored: %v", b.Entry.Name, t.Name, err))
				continue
			}
			seen[t.Name] = true
			schemas[t.Name] = resolved
			extra[t.Name] = extraOf(t)
			list = append(list, tools.Tool{
				Name: tools.PublicName(b.Entry.Name, t.Name), Plugin: b.Entry.Name, Tool: t.Name,
				Protocol: b.Manifest.Plugin.Protocol, Description: safeText(clip.Bytes(t.Description, plugin.MaxFieldLen)),
				InputSchema: schema, Params: schemaParams(schema),
			})
		}
		if res.NextCursor == "" {
			break
		}
		params.Cursor = res.NextCursor
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	s.listMu.Lock()
	s.list, s.schemas, s.extra = list, schemas, extra
	s.listMu.Unlock()
	return nil
}

func toolName(t *mcpsdk.Tool) string {
	if t == nil {
		return ""
	}
	return t.Name
}

// validToolName: what MCP allows in a tool name (letters, digits, _ - .), bounded, so
// the public name is safe to print and to pass on.
func validToolName(n string) bool {
	if n == "" || len(n) > maxToolNameLen {
		return false
	}
	for _, r := range n {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-' || r == '.')) {
			return false
		}
	}
	return true
}

// safeText is server-provided text made safe to pass on: every terminal sequence (colours
// too: ui.PlainText) and control removed.
func safeText(s string) string { return ui.PlainText(s) }

// inputSchema checks a tool's input schema (an object schema, bounded, resolvable without
// fetching anything) and returns it as JSON and resolved for validation.
func inputSchema(v any) (json.RawMessage, *jsonschema.Resolved, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("input schema does not encode: %w", err)
	}
	if len(raw) > maxSchemaBytes {
		return nil, nil, fmt.Errorf("input schema is %d bytes, over %d", len(raw), maxSchemaBytes)
	}
	if string(raw) == "null" {
		raw = []byte(`{"type":"object"}`)
	}
	var sch jsonschema.Schema
	if err := json.Unmarshal(raw, &sch); err != nil {
		return nil, nil, fmt.Errorf("input schema is not a JSON Schema: %w", err)
	}
	if sch.Type != "" && sch.Type != "object" {
		return nil, nil, fmt.Errorf("input schema has type %q, not object", sch.Type)
	}
	// No loader: a $ref to anything outside the schema fails instead of being fetched.
	res, err := sch.Resolve(&jsonschema.ResolveOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("input schema cannot be resolved: %w", err)
	}
	return raw, res, nil
}

// schemaParams are the top-level properties of an input schema as the catalogue's
// parameters (name order), so `fledge tools list` shows them and `fledge tools call`
// types name=value pairs. The catalogue then accepts only these names: an argument the
// schema does not name is refused before anything is sent.
func schemaParams(raw json.RawMessage) []tools.Param {
	var sch jsonschema.Schema
	if json.Unmarshal(raw, &sch) != nil || len(sch.Properties) == 0 {
		return nil
	}
	required := map[string]bool{}
	for _, r := range sch.Required {
		required[r] = true
	}
	names := make([]string, 0, len(sch.Properties))
	for n := range sch.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]tools.Param, 0, len(names))
	for _, n := range names {
		prop := sch.Properties[n]
		p := tools.Param{Name: n, Required: required[n]}
		if prop != nil {
			p.Type = prop.Type
			if p.Type == "" {
				// ["string", "null"] is a string that may be left null: "" (any) is honest.
				var nonNull []string
				for _, t := range prop.Types {
					if t != "null" {
						nonNull = append(nonNull, t)
					}
				}
				if len(nonNull) == 1 && len(prop.Types) == 1 {
					p.Type = nonNull[0]
				}
			}
			p.Description = clip.Bytes(safeText(prop.Description), 200)
		}
		out = append(out, p)
	}
	return out
}

// Tools lists the tools of one MCP plugin (starting its server).
func (p *Provider) Tools(ctx context.Context, b *core.Binding) ([]tools.Tool, error) {
	s, err := p.session(ctx, b)
	if err != nil {
		return nil, err
	}
	// A listing the server asked for (tools/list_changed) is under way: its answer, not
	// the list it replaces, is what gets checked against the pins (bounded wait).
	for deadline := time.Now().Add(relistWait); s.relisting.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	s.listMu.Lock()
	defer s.listMu.Unlock()
	return append([]tools.Tool(nil), s.list...), nil
}

// Instructions are the server's instructions from its initialize result (pinned with its
// tools by the catalogue).
func (p *Provider) Instructions(ctx context.Context, b *core.Binding) string {
	s, err := p.session(ctx, b)
	if err != nil || s.cs == nil {
		return ""
	}
	if r := s.cs.InitializeResult(); r != nil {
		return r.Instructions
	}
	return ""
}

// Call validates args against the tool's JSON Schema, records the decision, calls the
// tool and records the outcome.
// ConcurrentCalls: a server's session takes calls at once (the SDK matches answers by id).
func (p *Provider) ConcurrentCalls() bool { return true }

func (p *Provider) Call(ctx context.Context, b *core.Binding, t tools.Tool, args map[string]any) (*tools.Result, error) {
	s, err := p.session(ctx, b)
	if err != nil {
		return nil, err
	}
	if args == nil {
		args = map[string]any{}
	}
	s.listMu.Lock()
	resolved := s.schemas[t.Tool]
	s.listMu.Unlock()
	if resolved == nil {
		return nil, fmt.Errorf("%w %q", tools.ErrUnknownTool, t.Name)
	}
	// Validate a JSON round trip of the arguments: what the schema sees is what is sent.
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: arguments do not encode as JSON: %v", tools.ErrBadArguments, t.Name, err)
	}
	var inst any
	if err := json.Unmarshal(raw, &inst); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", tools.ErrBadArguments, t.Name, err)
	}
	if err := resolved.Validate(inst); err != nil {
		err = fmt.Errorf("%w: %s: %v", tools.ErrBadArguments, t.Name, err)
		s.rec.Record(audit.EventToolCall, audit.Deny, reason.BadArguments, tools.RefusalDetails(&t, args, err), true)
		return nil, err
	}
	sync, err := s.rec.BeforeAct(audit.EventToolCall, tools.CallDetails(t, args, s.argValues))
	if err != nil {
		// Audit before act: no record, no call.
		return nil, fmt.Errorf("%w: %w", core.ErrAudit, err)
	}
	if sync != nil {
		if err := sync(); err != nil {
			return nil, fmt.Errorf("%w: %w", core.ErrAudit, err)
		}
	}
	start := time.Now()
	timeout := s.callTimeout
	if d, ok := tools.CallTimeout(ctx); ok {
		timeout = d // fledge tools call --timeout, already within policy's maximum
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	params := &mcpsdk.CallToolParams{Name: t.Tool, Arguments: json.RawMessage(raw)}
	defer s.trackProgress(ctx, params)()
	res, err := s.cs.CallTool(cctx, params)
	out := map[string]any{"tool": t.Name, audit.DetailDurationMS: time.Since(start).Milliseconds()}
	if err != nil {
		return p.callFailed(cctx, s, t, timeout, out, err), nil
	}
	p.answered(s)
	result, rbytes := resultOutput(res)
	out["is_error"] = res.IsError
	out["result_bytes"] = rbytes
	if res.IsError {
		// The server's own words for the failure (e.g. EACCES from the sandbox), clipped.
		out["error"] = clip.Bytes(safeText(textOf(res)), maxErrorText)
	}
	rc := reason.OK
	if rbytes > maxResultBytes {
		rc = reason.LimitExceeded
		out[audit.DetailLimit] = "result_bytes"
		out[audit.DetailLimitValue] = maxResultBytes
		s.rec.Record(audit.EventToolOutcome, audit.Error, rc, out, true)
		return &tools.Result{Success: false, Reason: rc, Output: json.RawMessage("null"),
			Message: fmt.Sprintf("%s returned %d bytes, over the %d fledge passes on", t.Name, rbytes, maxResultBytes)}, nil
	}
	if res.IsError {
		// The tool ran and failed (the sandbox refused it a file, say): an error, never
		// "allow ok", with the tool's own words bounded.
		s.rec.Record(audit.EventToolOutcome, audit.Error, reason.ToolError, out, true)
	} else {
		s.rec.Record(audit.EventToolOutcome, audit.Allow, rc, out, true)
	}
	r := &tools.Result{Success: !res.IsError, Output: result, Reason: rc}
	if res.IsError {
		r.Message = textOf(res)
	}
	putRaw(ctx, res)
	return r, nil
}

// callFailed records and returns a call that got no result: a timeout, a cancel, a bound
// fledge enforced, a malformed answer, the server gone, or the server's JSON-RPC error (the
// call ran and failed on its side). A connection fledge ended for a bound or a protocol
// violation retires its server now.
func (p *Provider) callFailed(cctx context.Context, s *session, t tools.Tool, timeout time.Duration, out map[string]any, err error) *tools.Result {
	rc := reason.Crashed
	msg := s.explain(cctx, err, fmt.Sprintf("no answer within %s", timeout))
	switch {
	case errors.Is(msg, context.DeadlineExceeded):
		rc = reason.Timeout
		msg = fmt.Errorf("%w: %s after %s", ErrCallTimeout, t.Name, timeout)
	case errors.Is(cctx.Err(), context.Canceled):
		rc = reason.Cancelled
	case errors.Is(msg, ErrLineTooLong), errors.Is(msg, ErrFlood), errors.Is(msg, ErrTooManyPending):
		rc = reason.LimitExceeded
	case errors.Is(msg, ErrUnknownID), errors.Is(msg, ErrMalformed):
		rc = reason.MalformedResponse
	default:
		var werr *jsonrpc.Error
		if errors.As(err, &werr) {
			out["error"] = clip.Bytes(safeText(werr.Message), 1024)
			out["error_code"] = werr.Code
			s.rec.Record(audit.EventToolOutcome, audit.Error, reason.ToolError, out, true)
			return &tools.Result{Success: false, Reason: reason.OK, Output: json.RawMessage("null"),
				Message: fmt.Sprintf("%s: %s", t.Name, clip.Bytes(safeText(werr.Message), 1024))}
		}
	}
	out["error"] = msg.Error()
	s.rec.Record(audit.EventToolOutcome, audit.Error, rc, out, true)
	if s.cause() != nil {
		p.retire(s)
	}
	return &tools.Result{Success: false, Reason: rc, Message: msg.Error(), Output: json.RawMessage("null")}
}

// textOf joins a result's text content.
func textOf(res *mcpsdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// resultOutput is a tool result as the catalogue's JSON: the text when the content is all
// text, else the structured content when the server gave one, else the content list.
func resultOutput(res *mcpsdk.CallToolResult) (json.RawMessage, int) {
	allText := len(res.Content) > 0
	for _, c := range res.Content {
		if _, ok := c.(*mcpsdk.TextContent); !ok {
			allText = false
		}
	}
	var v any
	switch {
	case allText:
		v = textOf(res)
	case res.StructuredContent != nil:
		v = res.StructuredContent
	default:
		v = res.Content
	}
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprintf("result does not encode: %v", err))
	}
	return b, len(b)
}

// retire ends one server and forgets it (the next use starts a fresh one).
func (p *Provider) retire(s *session) {
	p.mu.Lock()
	if p.sessions[s.name] == s {
		delete(p.sessions, s.name)
	}
	p.mu.Unlock()
	s.close("bound")
}

// Close ends every server this provider started.
func (p *Provider) Close() error {
	p.mu.Lock()
	ss := tools.TakeAll(p.sessions)
	p.mu.Unlock()
	tools.CloseSessions(ss, func(s *session) { s.close("shutdown") })
	return nil
}

// fileURI is the file:// URI of an absolute path.
func fileURI(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }
