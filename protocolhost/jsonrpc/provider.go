// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/internal/filestamp"
	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

// Timeouts of the protocol. HookTimeout is the spec's ("5-second timeout per hook
// response"); the handshake gets the same bound.
const (
	HookTimeout      = 5 * time.Second
	HandshakeTimeout = 5 * time.Second
	// ShutdownWait bounds the wait for the answer to shutdown before the plugin's stdin is
	// closed (the ladder's SIGTERM and SIGKILL still follow if it does not exit).
	ShutdownWait = time.Second
)

func init() {
	tools.Register(plugin.ProtocolJSONRPC, func(h *tools.Host) tools.Provider { return New(h) })
}

// Provider runs the jsonrpc-2.0 plugins of one fledge invocation: each is started on first
// use, handshakes once, and stays up until Close. It serves the tools catalogue and runs
// hook chains.
type Provider struct {
	host *tools.Host

	mu       sync.Mutex
	sessions map[string]*session
	excluded map[string]error
	order    []string // installed jsonrpc-2.0 plugins, by name (nil: not loaded yet)
	closed   bool
	// listed is the last read of each plugin's recorded handshake (the catalogue lists a
	// plugin's tools at every call): see recorded.
	listed map[string]listedManifest
}

type listedManifest struct {
	raw     []byte
	m       *Manifest
	stamp   filestamp.Stamp // of the file raw was read from
	vouched bool            // the stamp vouches for raw (the file had settled)
}

type session struct {
	b           *core.Binding
	man         *Manifest
	conn        *conn
	proc        *core.Proc
	rec         *core.Recorder
	toolTimeout time.Duration
	// log is the plugin's stderr; userErr where its end is shown when the plugin failed.
	log     *core.PluginLog
	userErr io.Writer
}

// New makes the provider of one invocation.
func New(h *tools.Host) *Provider {
	return &Provider{host: h, sessions: map[string]*session{}, excluded: map[string]error{}}
}

func (p *Provider) stderr() io.Writer {
	if p.host.Stderr == nil {
		return io.Discard
	}
	return p.host.Stderr
}

func (p *Provider) warn(msg string) { fmt.Fprintf(p.stderr(), "fledge: warning: %s\n", msg) }

// Recorded is the manifest install recorded for the plugin (its handshake then).
func Recorded(b *core.Binding) (*Manifest, error) {
	data, err := readSmall(filepath.Join(b.Dir, plugin.HandshakeFile), 4<<20)
	if err != nil {
		return nil, fmt.Errorf("plugin %s has no recorded handshake (%v): reinstall it", b.Entry.Name, err)
	}
	m, err := DecodeRecorded(data)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: recorded handshake: %w: reinstall it", b.Entry.Name, err)
	}
	return m, nil
}

// recorded is Recorded without reading the file again while its stamp says it is the one
// read last (unchanged and settled, see filestamp), nor parsing it again while its bytes
// are the ones parsed last. The manifest it returns is shared: callers only read it.
func (p *Provider) recorded(b *core.Binding) (*Manifest, error) {
	path := filepath.Join(b.Dir, plugin.HandshakeFile)
	key := b.Dir
	p.mu.Lock()
	l, have := p.listed[key]
	p.mu.Unlock()
	if have && l.vouched {
		if fi, err := os.Stat(path); err == nil {
			if st, ok := filestamp.Of(fi, time.Now()); ok && st == l.stamp {
				return l.m, nil
			}
		}
	}
	data, fi, err := readSmallInfo(path, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("plugin %s has no recorded handshake (%v): reinstall it", b.Entry.Name, err)
	}
	st, vouched := filestamp.Of(fi, time.Now())
	m := l.m
	if !have || !bytes.Equal(l.raw, data) {
		if m, err = DecodeRecorded(data); err != nil {
			return nil, fmt.Errorf("plugin %s: recorded handshake: %w: reinstall it", b.Entry.Name, err)
		}
	}
	p.mu.Lock()
	if p.listed == nil || len(p.listed) >= MaxPlugins*4 {
		p.listed = map[string]listedManifest{}
	}
	p.listed[key] = listedManifest{raw: data, m: m, stamp: st, vouched: vouched}
	p.mu.Unlock()
	return m, nil
}

func readSmall(path string, max int64) ([]byte, error) {
	data, _, err := readSmallInfo(path, max)
	return data, err
}

// readSmallInfo is readSmall that also returns the fstat taken before the bytes were read
// (what a stamp of them must come from).
func readSmallInfo(path string, max int64) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > max {
		return nil, nil, fmt.Errorf("%s is not a regular file under %d bytes", path, max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max))
	return data, st, err
}

// Loadable reports whether the plugin is among the MaxPlugins this invocation may run
// (installed jsonrpc-2.0 plugins in name order, as a JSON-RPC 2.0 host scans its dir).
func (p *Provider) Loadable(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loadableLocked(name)
}

func (p *Provider) loadableLocked(name string) error {
	if p.order == nil {
		reg, err := plugin.LoadRegistry(p.host.Env.ConfigDir)
		if err != nil {
			return err
		}
		p.order = []string{}
		for _, en := range reg.Plugins {
			if en.Protocol == plugin.ProtocolJSONRPC {
				p.order = append(p.order, en.Name)
			}
		}
		sort.Strings(p.order)
	}
	for i, n := range p.order {
		if n == name {
			if i >= MaxPlugins {
				return fmt.Errorf("%w: plugin %s not loaded: fledge runs at most %d jsonrpc-2.0 plugins (the protocol's limit) and %d are installed; remove one", ErrLimit, name, MaxPlugins, len(p.order))
			}
			return nil
		}
	}
	return nil
}

// ListingVersion is the recorded handshake Tools lists from: the same manifest while the
// file is the one read last (its stamp vouches for it) or holds the same bytes.
func (p *Provider) ListingVersion(b *core.Binding) (any, bool) {
	if err := p.Loadable(b.Entry.Name); err != nil {
		return nil, false
	}
	m, err := p.recorded(b)
	if err != nil {
		return nil, false
	}
	return m, true
}

// Tools lists the plugin's tools from the handshake recorded at install: listing never
// starts a plugin.
func (p *Provider) Tools(_ context.Context, b *core.Binding) ([]tools.Tool, error) {
	if err := p.Loadable(b.Entry.Name); err != nil {
		return nil, err
	}
	m, err := p.recorded(b)
	if err != nil {
		return nil, err
	}
	out := make([]tools.Tool, 0, len(m.Tools))
	for _, t := range m.Tools {
		out = append(out, tools.Tool{
			Name: tools.PublicName(b.Entry.Name, t.Name), Plugin: b.Entry.Name, Tool: t.Name,
			Protocol: plugin.ProtocolJSONRPC, Description: t.Description, Params: append([]tools.Param{}, t.Parameters...),
		})
	}
	return out, nil
}

// session returns the plugin's live session, starting it (one handshake) on first use. A
// plugin that failed its handshake is excluded for the rest of the invocation.
func (p *Provider) session(ctx context.Context, b *core.Binding) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := b.Entry.Name
	if p.closed {
		return nil, fmt.Errorf("%w: fledge is shutting down", ErrGone)
	}
	if err := p.excluded[name]; err != nil {
		return nil, fmt.Errorf("%w: %w", ErrExcluded, err)
	}
	if s := p.sessions[name]; s != nil {
		select {
		case <-s.conn.Dead():
			return nil, fmt.Errorf("plugin %s: %w", name, s.conn.err())
		default:
		}
		return s, nil
	}
	if err := p.loadableLocked(name); err != nil {
		return nil, err
	}
	if len(p.sessions) >= MaxPlugins {
		return nil, fmt.Errorf("%w: plugin %s not started: %d jsonrpc-2.0 plugins already run (the protocol's limit)", ErrLimit, name, MaxPlugins)
	}
	s, err := p.start(ctx, b)
	if err != nil {
		p.excluded[name] = err
		p.warn(fmt.Sprintf("plugin %s excluded for this run: %v", name, err))
		return nil, err
	}
	p.sessions[name] = s
	return s, nil
}

func (p *Provider) start(ctx context.Context, b *core.Binding) (*session, error) {
	env := p.host.Env
	recorded, err := Recorded(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	if len(b.Manifest.Commands) != 1 {
		return nil, fmt.Errorf("%w: plugin %s must declare exactly one [[commands]] binary", ErrHandshake, b.Entry.Name)
	}
	log, err := env.Audit()
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %v", core.ErrLaunch, core.ErrAudit, err)
	}
	program, err := env.Program(b, b.Manifest.Commands[0].Binary)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrLaunch, err)
	}
	rec := env.NewRecorder(log, b.Ref, p.warn)
	prof := env.Profile(b, os.Environ(), PluginEnv(b.Entry.Name, b.Paths.PluginDataDir), nil)
	if err := prepareHome(b.DataDir); err != nil {
		return nil, fmt.Errorf("%w: data dir: %v", core.ErrLaunch, err)
	}
	cwd := b.StartDir("", prof.Plugin.Access)
	timeout, terr := policy.CallTimeout(b.Manifest.Plugin.Timeout, prof.Session)
	if terr != nil {
		p.warn(fmt.Sprintf("plugin %s: %v", b.Entry.Name, terr))
	}
	// The plugin's stderr is no word to the user: its log, shown when it fails (and -v).
	s := &session{b: b, rec: rec, toolTimeout: timeout, log: env.OpenServerLog(b.Entry.Name, p.stderr()), userErr: p.stderr()}
	s.proc, s.conn, err = spawn(env, rec, prof, b.Entry.Name, program, cwd, s.log, p.warn)
	if err != nil {
		_ = s.log.Close()
		return nil, err
	}
	live, err := handshake(ctx, s.conn, HandshakeTimeout)
	if err == nil && !live.Same(recorded) {
		err = fmt.Errorf("%w: %w (%s); reinstall it to review the change",
			ErrHandshake, ErrManifestChanged, recorded.Diff(live))
	}
	if err != nil {
		rec.Record(audit.EventPluginStart, audit.Deny, reason.HandshakeFailed, map[string]any{"error": err.Error()}, true)
		s.proc.Stop(string(reason.HandshakeFailed), false, nil)
		s.proc.Stop(string(reason.HandshakeFailed), false, nil) // a second Stop kills at once
		s.conn.recordMalformed()
		s.proc.Finish(map[string]any{"protocol": plugin.ProtocolJSONRPC})
		s.log.ShowTail(s.userErr)
		_ = s.log.Close()
		if hint := env.InterpreterHint(b.Paths, program, prof.Plugin.Access); hint != "" && errors.Is(err, ErrGone) {
			err = fmt.Errorf("%w: %s", err, hint)
		}
		return nil, err
	}
	s.man = live
	return s, nil
}

// refuse records a call that was not sent because the plugin could not be started (or was
// excluded): a deny record with the reason, in a session of its own.
func (p *Provider) refuse(b *core.Binding, event string, err error, details map[string]any) {
	log, aerr := p.host.Env.Audit()
	if aerr != nil {
		return
	}
	d := make(map[string]any, len(details)+1)
	for k, v := range details {
		d[k] = v
	}
	d["error"] = err.Error()
	p.host.Env.NewRecorder(log, b.Ref, p.warn).Record(event, audit.Deny, ReasonOf(err), d, true)
}

// PluginEnv is the plugin process's own environment on top of what policy lets through:
// HOME is its private data dir, so a plugin that writes ~/.local/... writes there.
func PluginEnv(name, dataDir string) map[string]string {
	return map[string]string{"HOME": dataDir, "FLEDGE_PLUGIN": name, "FLEDGE_DATA_DIR": dataDir}
}

// prepareHome makes the dirs the JSON-RPC 2.0 host guarantees under HOME (its plugins live in
// ~/.local/scaffold/plugins, so such plugins may write ~/.local/scaffold/...) inside the
// plugin's data dir. The data dir is the plugin's to write: a symlink it planted there
// (~/.local -> /etc) is refused, never followed (safefs).
func prepareHome(dataDir string) error {
	return safefs.MkdirAll(dataDir, filepath.Join(".local", "scaffold"), 0o700)
}

func spawn(env *core.Env, rec *core.Recorder, prof policy.Profile, name, program, cwd string, stderr io.Writer, warn func(string)) (*core.Proc, *conn, error) {
	spec := prof.Plugin
	spec.Kind, spec.Name, spec.Path, spec.Args = sandbox.KindPlugin, name, program, []string{program}
	proc, err := core.Spawn(core.SpawnOptions{
		Sandbox: env.Sandbox, Spec: spec, Cwd: cwd, Pipes: true, Stderr: stderr, Recorder: rec,
		StartDetails: map[string]any{"protocol": plugin.ProtocolJSONRPC},
		Ladder:       core.Ladder{CancelGrace: prof.Session.CancelGrace, KillAfter: prof.Session.KillAfter},
		DrainTimeout: prof.Session.DrainTimeout,
	})
	if err != nil {
		return nil, nil, err
	}
	return proc, newConn(name, proc, rec, prof.Session.LineMax, prof.Session.PendingRequests, warn), nil
}

// handshake sends initialize and validates the manifest.
func handshake(ctx context.Context, c *conn, timeout time.Duration) (*Manifest, error) {
	raw, err := c.Call(ctx, "initialize", map[string]any{"protocol_version": 1}, timeout, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	m, err := ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return m, nil
}

// stop ends a session: shutdown, then SIGTERM, then SIGKILL (the ladder). A plugin stuck in
// a request that timed out is not reading: it is killed at once.
//
// The seed's plugins exit after answering shutdown; many loop over stdin until it ends and
// some do not know shutdown at all (they answer "Unknown method" and read on). So once the
// answer came, or ShutdownWait passed, the plugin's stdin is closed: a plugin like that ends
// by itself at EOF instead of waiting out the ladder and dying of its SIGTERM (a crash on
// record for what was an orderly stop).
func (s *session) stop() {
	failed := false
	select {
	case <-s.proc.Done():
		failed = true // it ended before it was asked to
	default:
	}
	s.proc.Stop("shutdown", false, func() {
		_, _ = s.conn.Call(context.Background(), "shutdown", map[string]any{}, ShutdownWait, nil)
		s.conn.closeInput()
	})
	if s.conn.hasExpired() {
		s.proc.Stop("shutdown", false, nil)
	}
	s.conn.recordMalformed()
	s.proc.Finish(map[string]any{"protocol": plugin.ProtocolJSONRPC})
	if failed || s.conn.hasExpired() {
		s.log.ShowTail(s.userErr)
	}
	_ = s.log.Close()
}

// Close shuts every plugin of this invocation down (in parallel) and waits for them.
func (p *Provider) Close() error {
	p.mu.Lock()
	p.closed = true
	ss := tools.TakeAll(p.sessions)
	p.mu.Unlock()
	tools.CloseSessions(ss, (*session).stop)
	return nil
}

// ConcurrentCalls: a plugin's connection matches answers to requests by id, up to its
// pending_requests bound.
func (p *Provider) ConcurrentCalls() bool { return true }

// Call runs one tool. Failures of the plugin or of fledge (timeout, crash, bad answer,
// failed handshake) come back as a Result with their reason; the error is for a call that
// cannot be made at all.
func (p *Provider) Call(ctx context.Context, b *core.Binding, t tools.Tool, args map[string]any) (*tools.Result, error) {
	fail := func(err error) (*tools.Result, error) {
		return &tools.Result{Success: false, Reason: ReasonOf(err), Message: err.Error()}, nil
	}
	details := map[string]any{"tool": t.Name, "method": "tool/execute", "plugin_tool": t.Tool}
	s, err := p.session(ctx, b)
	if err != nil {
		p.refuse(b, audit.EventToolCall, err, details)
		return fail(err)
	}
	if s.man.Tool(t.Tool) == nil {
		s.rec.Record(audit.EventToolCall, audit.Deny, reason.CapabilityNotDeclared, details, true)
		return fail(fmt.Errorf("%w: plugin %s does not declare tool %q", ErrMalformed, b.Entry.Name, t.Tool))
	}
	if args == nil {
		args = map[string]any{}
	}
	// Durable before the request is written: the write follows at once, so the fsync runs
	// here rather than in the background (shared with concurrent calls' records).
	if err := s.rec.BeforeActNow(audit.EventToolCall, details); err != nil {
		return fail(fmt.Errorf("%w: %w: %v", core.ErrLaunch, core.ErrAudit, err))
	}
	timeout := s.toolTimeout
	if d, ok := tools.CallTimeout(ctx); ok {
		timeout = d
	}
	start := time.Now()
	raw, err := s.conn.Call(ctx, "tool/execute", toolParams{Arguments: args, Name: t.Tool}, timeout, nil)
	var res *tools.Result
	if err == nil {
		res, err = toolResult(raw)
	}
	if err != nil {
		res = &tools.Result{Success: false, Reason: ReasonOf(err), Message: fmt.Sprintf("plugin %s: %v", b.Entry.Name, err)}
	}
	d, rc := audit.Allow, res.Reason
	out := map[string]any{"tool": t.Name, audit.DetailDurationMS: time.Since(start).Milliseconds(), "success": res.Success}
	switch {
	case rc != reason.OK:
		d = audit.Error
	case !res.Success:
		// The tool ran and answered success: false: an error outcome, never "allow ok".
		d, rc = audit.Error, reason.ToolError
		if msg := string(res.Output); len(msg) > 0 && msg != "null" {
			if len(msg) > 1024 {
				msg = msg[:1024] + "..."
			}
			out["error"] = msg
		}
	}
	s.rec.Record(audit.EventToolOutcome, d, rc, out, false)
	return res, nil
}

// toolParams are tool/execute's params.
type toolParams struct {
	Arguments map[string]any `json:"arguments"`
	Name      string         `json:"name"`
}

func toolResult(raw json.RawMessage) (*tools.Result, error) {
	var r struct {
		Success *bool           `json:"success"`
		Result  json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Success == nil {
		return nil, fmt.Errorf("%w: tool/execute result must be {\"success\": bool, \"result\": ...}", ErrMalformed)
	}
	out := r.Result
	if len(out) == 0 {
		out = json.RawMessage(`""`)
	}
	return &tools.Result{Success: *r.Success, Output: out, Reason: reason.OK}, nil
}

// Excluded lists the plugins that failed to start in this invocation, with why.
func (p *Provider) Excluded() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for n, e := range p.excluded {
		out[n] = e.Error()
	}
	return out
}

var _ tools.Provider = (*Provider)(nil)
