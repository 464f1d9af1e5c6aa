// SPDX-License-Identifier: MIT

// Package runtimev1 is the runtime-v1 adapter (the runtime contract): one handshake, one execute, and
// an explicit failure code for every way the exchange can go wrong. It runs on the session
// core (spawn, audit, ladder) and offers the plugin's tools to the tools catalogue.
//
// The sandbox profile of a call is built from the capabilities the plugin's handshake
// declared, never from more than was granted: a first, capability-less run learns the
// declaration (a "discovery" handshake, cached for the fledge invocation), and the call then
// runs under a profile of exactly the declared capabilities, whose handshake must declare
// them again against that narrower allow-list.
package runtimev1

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol/lines"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/ui/clip"
)

// ProtocolVersion is the protocol_version of runtime-v1 handshakes.
const ProtocolVersion = "1"

// exitGrace is how long a plugin has to exit on its own once its stdin is closed before the
// ladder (SIGTERM, then SIGKILL) ends it.
const exitGrace = 2 * time.Second

// ErrRuntime is wrapped by every *Failure.
var ErrRuntime = errors.New("runtime-v1 plugin failed")

// Failure is a failure of fledge's taxonomy (reason.Failure), wrapping ErrRuntime.
type Failure = reason.Failure

func fail(code reason.Code, format string, a ...any) *Failure {
	return &Failure{Code: code, Msg: fmt.Sprintf(format, a...), Of: ErrRuntime}
}

// HandshakeRequest is the host's first line.
type HandshakeRequest struct {
	Type            string   `json:"type"`
	ProtocolVersion string   `json:"protocol_version"`
	Tool            string   `json:"tool"`
	Capabilities    []string `json:"capabilities"`
}

// Manifest is what the plugin's handshake declares.
type Manifest struct {
	PluginID        string   `json:"plugin_id"`
	PluginVersion   string   `json:"plugin_version"`
	ProtocolVersion string   `json:"protocol_version"`
	ExposedTools    []string `json:"exposed_tools"`
	Capabilities    []string `json:"capabilities"`

	// versionNotString: protocol_version came as another JSON type (1, 1.0, true). That is
	// a plugin written for another version of the contract (protocol_version_mismatch), not
	// a reply fledge cannot read (malformed_response).
	versionNotString bool
}

// UnmarshalJSON reads a manifest whose protocol_version may be any JSON value: a string is
// the version, anything else is kept as its JSON text and marked as not a string.
func (m *Manifest) UnmarshalJSON(b []byte) error {
	type plain Manifest
	var raw struct {
		plain
		ProtocolVersion json.RawMessage `json:"protocol_version"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*m = Manifest(raw.plain)
	m.ProtocolVersion, m.versionNotString = "", false
	v := bytes.TrimSpace(raw.ProtocolVersion)
	switch {
	case len(v) == 0 || string(v) == "null":
	case v[0] == '"':
		if err := json.Unmarshal(v, &m.ProtocolVersion); err != nil {
			return err
		}
	default:
		m.ProtocolVersion, m.versionNotString = string(v), true
	}
	return nil
}

// ExecuteRequest is the host's second line.
type ExecuteRequest struct {
	Type  string          `json:"type"`
	Tool  string          `json:"tool"`
	Input json.RawMessage `json:"input"`
}

// PluginError is the error a plugin reports for its tool.
type PluginError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CapabilityNames spells grants the way runtime-v1 handshakes carry them (policy.WireName):
// exec, store, metadata, network, filesystem:<level>.
func CapabilityNames(g policy.Grants) []string {
	out := []string{}
	for _, n := range g.Names() {
		out = append(out, policy.WireName(n))
	}
	return out
}

// grantsOf is the inverse of CapabilityNames (policy.ParseGrantName reads both spellings),
// for values already checked against an allow-list made by it.
func grantsOf(names []string) policy.Grants {
	g := policy.Grants{Filesystem: policy.FilesystemNone}
	for _, n := range names {
		if one, err := policy.ParseGrantName(n); err == nil {
			g = g.Union(one)
		}
	}
	return g
}

// CheckManifest applies the runtime contract's checks to a handshake manifest: required
// fields, the plugin id, the protocol version, the capability declaration against allow,
// and (when tool is not "") that the tool is exposed.
func CheckManifest(m *Manifest, pluginName, tool string, allow []string) *Failure {
	switch {
	case m.PluginID == "" || m.PluginVersion == "" || m.ProtocolVersion == "" || m.ExposedTools == nil:
		return fail(reason.HandshakeFailed, "the handshake manifest lacks a required field (plugin_id, plugin_version, protocol_version, exposed_tools)")
	case m.PluginID != pluginName:
		return fail(reason.HandshakeFailed, "the handshake names plugin %q, but this is plugin %q", clip.Bytes(m.PluginID, 80), pluginName)
	case m.versionNotString:
		return fail(reason.ProtocolVersionMismatch, "the plugin speaks runtime protocol version %s (a JSON %s), fledge speaks %q (a string)", clip.Bytes(m.ProtocolVersion, 80), jsonKind(m.ProtocolVersion), ProtocolVersion)
	case m.ProtocolVersion != ProtocolVersion:
		return fail(reason.ProtocolVersionMismatch, "the plugin speaks runtime protocol version %q, fledge speaks %q", clip.Bytes(m.ProtocolVersion, 80), ProtocolVersion)
	}
	for _, t := range m.ExposedTools {
		if !plugin.ValidName(t) {
			return fail(reason.HandshakeFailed, "exposed tool %q is not a valid tool name ([a-z0-9][a-z0-9_-]*)", clip.Bytes(t, 80))
		}
	}
	allowed := map[string]bool{}
	for _, a := range allow {
		allowed[a] = true
	}
	seen := map[string]bool{}
	for _, c := range m.Capabilities {
		switch {
		case strings.TrimSpace(c) == "":
			return fail(reason.CapabilityNotAllowed, "the handshake declares an empty capability")
		case strings.TrimSpace(c) != c:
			return fail(reason.CapabilityNotAllowed, "the handshake declares capability %q with surrounding whitespace", clip.Bytes(c, 80))
		case seen[c]:
			return fail(reason.CapabilityNotAllowed, "the handshake declares capability %q twice", clip.Bytes(c, 80))
		case !allowed[c]:
			return fail(reason.CapabilityNotAllowed, "the handshake declares capability %q, which is not granted (allowed: %s)", clip.Bytes(c, 80), listOrNone(allow))
		}
		seen[c] = true
	}
	if len(allow) > 0 && len(m.Capabilities) == 0 {
		return fail(reason.CapabilityNotDeclared, "the plugin is granted %s but its handshake declares no capabilities", strings.Join(allow, ", "))
	}
	if tool != "" && !contains(m.ExposedTools, tool) {
		return fail(reason.ToolNotExposed, "the plugin does not expose tool %q (exposed: %s)", clip.Bytes(tool, 80), listOrNone(m.ExposedTools))
	}
	return nil
}

// jsonKind names the JSON type of a non-string, non-null value.
func jsonKind(v string) string {
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// decodeObject decodes one line that must be exactly one JSON object.
func decodeObject(line []byte, v any) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		return errors.New("not one complete JSON object")
	}
	return json.Unmarshal(line, v)
}

// Outcome is how one runtime-v1 run ended.
type Outcome struct {
	Manifest    *Manifest
	Output      json.RawMessage // the result's output (execute runs)
	PluginError *PluginError    // the plugin's own error reply
	Failure     *Failure        // a failure of fledge's taxonomy
	ExitCode    int
}

// Provider is runtime-v1's side of the tools catalogue.
type Provider struct {
	h *tools.Host

	mu       sync.Mutex
	declared map[string]*Manifest // discovery handshakes by plugin name
}

// New makes the provider of one fledge invocation.
func New(h *tools.Host) *Provider { return &Provider{h: h, declared: map[string]*Manifest{}} }

func init() {
	tools.Register(plugin.ProtocolRuntime, func(h *tools.Host) tools.Provider { return New(h) })
}

// Close: runtime-v1 plugins live for one call only; nothing outlives it.
func (p *Provider) Close() error { return nil }

// Tools lists the plugin's tools: its [[tools]] when plugin.toml declares them, else the
// exposed_tools of a discovery handshake.
func (p *Provider) Tools(ctx context.Context, b *core.Binding) ([]tools.Tool, error) {
	name := b.Entry.Name
	var out []tools.Tool
	if len(b.Manifest.Tools) > 0 {
		for _, d := range b.Manifest.Tools {
			t := tools.Tool{Name: tools.PublicName(name, d.Name), Plugin: name, Tool: d.Name, Protocol: plugin.ProtocolRuntime, Description: d.Description}
			for _, prm := range d.Parameters {
				t.Params = append(t.Params, tools.Param{Name: prm.Name, Type: prm.Type, Description: prm.Description, Required: prm.Required})
			}
			if len(t.Params) == 0 {
				t.InputSchema = json.RawMessage(`{"type":"object"}`)
			}
			out = append(out, t)
		}
		return out, nil
	}
	m, f := p.Discover(ctx, b, "")
	if f != nil {
		return nil, f
	}
	for _, tn := range m.ExposedTools {
		out = append(out, tools.Tool{Name: tools.PublicName(name, tn), Plugin: name, Tool: tn, Protocol: plugin.ProtocolRuntime,
			InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return out, nil
}

// Call runs one tool: the discovery handshake (cached), then a run under the profile of
// the declared capabilities with handshake and execute.
func (p *Provider) Call(ctx context.Context, b *core.Binding, t tools.Tool, args map[string]any) (*tools.Result, error) {
	if args == nil {
		args = map[string]any{}
	}
	input, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tools.ErrBadArguments, err)
	}
	out := p.Execute(ctx, b, t.Tool, input)
	return ResultOf(out), nil
}

// ResultOf turns an outcome into the catalogue's result.
func ResultOf(out *Outcome) *tools.Result {
	switch {
	case out.Failure != nil:
		return &tools.Result{Success: false, Output: json.RawMessage("null"), Reason: out.Failure.Code, Message: out.Failure.Msg}
	case out.PluginError != nil:
		b, _ := json.Marshal(out.PluginError)
		return &tools.Result{Success: false, Output: b, Reason: reason.OK,
			Message: fmt.Sprintf("the tool failed: %s: %s", out.PluginError.Code, out.PluginError.Message)}
	}
	return &tools.Result{Success: true, Output: out.Output, Reason: reason.OK}
}

// Discover runs (once per plugin per invocation) a handshake under a profile with no
// capabilities at all, against the full allow-list of the binding's grants, to learn what
// the plugin declares. tool, when not "", must be exposed.
func (p *Provider) Discover(ctx context.Context, b *core.Binding, tool string) (*Manifest, *Failure) {
	p.mu.Lock()
	m := p.declared[b.Entry.Name]
	p.mu.Unlock()
	if m == nil {
		out := p.run(ctx, b, runSpec{phase: "discovery", tool: tool, allow: CapabilityNames(b.Entry.Granted), caps: policy.Grants{Filesystem: policy.FilesystemNone}})
		if out.Failure != nil {
			return nil, out.Failure
		}
		m = out.Manifest
		p.mu.Lock()
		p.declared[b.Entry.Name] = m
		p.mu.Unlock()
	}
	if tool != "" && !contains(m.ExposedTools, tool) {
		return nil, fail(reason.ToolNotExposed, "the plugin does not expose tool %q (exposed: %s)", clip.Bytes(tool, 80), listOrNone(m.ExposedTools))
	}
	return m, nil
}

// Execute runs tool with input: discovery, then the call under the declared profile.
func (p *Provider) Execute(ctx context.Context, b *core.Binding, tool string, input json.RawMessage) *Outcome {
	m, f := p.Discover(ctx, b, tool)
	if f != nil {
		return &Outcome{Failure: f}
	}
	// The run's profile is the declared capabilities, which discovery proved a subset of
	// the grants; its handshake is checked against exactly those.
	declared := append([]string{}, m.Capabilities...)
	return p.run(ctx, b, runSpec{phase: "execute", tool: tool, allow: declared, caps: grantsOf(declared), input: input})
}

type runSpec struct {
	phase string
	tool  string
	allow []string      // the allow-list sent in the handshake
	caps  policy.Grants // what the run's sandbox profile is built from
	input json.RawMessage
}

type lineMsg struct {
	line []byte
	err  error
}

type session struct {
	b        *core.Binding
	rec      *core.Recorder
	proc     *core.Proc
	lines    chan lineMsg
	quit     chan struct{}
	lineMax  int
	timedOut atomic.Bool
	cancel   atomic.Bool
	timeout  time.Duration
}

// withGrants is the binding with its grants replaced (the profile of a run is built from
// what the handshake declared).
func withGrants(b *core.Binding, g policy.Grants) *core.Binding {
	nb := *b
	en := *b.Entry
	en.Granted = g
	nb.Entry = &en
	return &nb
}

func (p *Provider) warn(msg string) {
	if p.h.Stderr != nil {
		fmt.Fprintf(p.h.Stderr, "fledge: warning: %s\n", msg)
	}
}

func (p *Provider) run(ctx context.Context, b *core.Binding, rs runSpec) *Outcome {
	env := p.h.Env
	name := b.Entry.Name
	if len(b.Manifest.Commands) == 0 {
		return &Outcome{Failure: fail(reason.LaunchFailed, "plugin %s declares no command to run", name)}
	}
	program, err := env.Program(b, b.Manifest.Commands[0].Binary)
	if err != nil {
		return &Outcome{Failure: fail(reason.LaunchFailed, "plugin %s: %v", name, err)}
	}
	log, err := env.Audit()
	if err != nil {
		return &Outcome{Failure: fail(reason.LaunchFailed, "plugin %s not started: %v", name, err)}
	}
	prof := env.Profile(withGrants(b, rs.caps), os.Environ(), map[string]string{
		"FLEDGE_PLUGIN": name, "FLEDGE_DATA_DIR": b.Paths.PluginDataDir, "FLEDGE_PROTOCOL": plugin.ProtocolRuntime,
	}, nil)
	timeout, terr := policy.CallTimeout(b.Manifest.Plugin.Timeout, prof.Session)
	if terr != nil && rs.phase == "execute" {
		p.warn(fmt.Sprintf("plugin %s: %v", name, terr))
	}
	if d, ok := tools.CallTimeout(ctx); ok && rs.phase == "execute" {
		timeout = d // the caller's --timeout, already within policy's maximum
	}
	rec := env.NewRecorder(log, b.Ref, p.warn)
	spec := prof.Plugin
	spec.Kind, spec.Name, spec.Path, spec.Args = sandbox.KindPlugin, name, program, []string{program}
	cwd := withGrants(b, rs.caps).StartDir("", spec.Access)
	proc, err := core.Spawn(core.SpawnOptions{
		Sandbox: env.Sandbox, Spec: spec, Cwd: cwd, Pipes: true, Stderr: p.h.Stderr, Recorder: rec,
		StartDetails: map[string]any{
			"protocol": plugin.ProtocolRuntime, "phase": rs.phase, "tool": rs.tool,
			"capabilities": rs.allow, "timeout_s": timeout.Seconds(),
		},
		Ladder:       core.Ladder{CancelGrace: prof.Session.CancelGrace, KillAfter: prof.Session.KillAfter},
		DrainTimeout: prof.Session.DrainTimeout,
	})
	if err != nil {
		return &Outcome{Failure: fail(core.LaunchReason(err), "plugin %s: %v", name, err)} // err says why, once
	}
	s := &session{b: b, rec: rec, proc: proc, lines: make(chan lineMsg), quit: make(chan struct{}), lineMax: prof.Session.LineMax, timeout: timeout}
	go s.read(lines.NewReader(proc.Stdout, prof.Session.LineMax))
	// The timeout is the host's: the plugin is killed, and the run fails with "timeout".
	timer := time.AfterFunc(timeout, func() {
		s.timedOut.Store(true)
		proc.Stop(string(reason.Timeout), false, nil)
		_ = proc.Kill()
	})
	stopCtx := context.AfterFunc(ctx, func() {
		s.cancel.Store(true)
		proc.Stop(string(reason.Cancelled), false, nil)
		_ = proc.Kill()
	})
	out := s.converse(rs)
	timer.Stop()
	stopCtx()
	// The exchange is over: the plugin gets EOF and must exit; a line after the one
	// response is a protocol violation.
	_ = proc.Stdin.Close()
	if out.Failure == nil {
		if f := s.expectEOF(); f != nil {
			out.Failure, out.Output, out.PluginError = f, nil, nil
		}
	} else {
		proc.Stop(string(out.Failure.Code), false, nil)
		_ = proc.Kill()
	}
	close(s.quit)
	ex := proc.Finish(map[string]any{"protocol": plugin.ProtocolRuntime, "phase": rs.phase})
	out.ExitCode = ex.Code
	if out.Failure != nil && out.Failure.Code == reason.Crashed && ex.Result != nil && ex.Result.OOMKilled {
		out.Failure.Code = reason.OOMKilled
	}
	if rs.phase == "execute" && out.Manifest != nil {
		s.recordOutcome(out)
	}
	return out
}

func (s *session) read(lr *lines.Reader) {
	for {
		line, _, err := lr.Next()
		select {
		case s.lines <- lineMsg{line, err}:
		case <-s.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// next is the plugin's next line, or the failure that stands for it.
func (s *session) next(what string) ([]byte, *Failure) {
	m := <-s.lines
	switch {
	case m.err == nil:
		return m.line, nil
	case s.timedOut.Load():
		return nil, fail(reason.Timeout, "the plugin did not send its %s within %s", what, s.timeout)
	case s.cancel.Load():
		return nil, fail(reason.Cancelled, "the call was cancelled before the plugin sent its %s", what)
	case errors.Is(m.err, lines.ErrTooLong):
		return nil, fail(reason.MalformedResponse, "the plugin's %s is longer than %d bytes", what, s.lineMax)
	case errors.Is(m.err, io.EOF):
		// The plugin closed its stdout: it is gone, or going, before a valid response.
		code := "exited"
		if res, _ := s.waitDone(); res != nil {
			code = fmt.Sprintf("exited with status %d", res.ExitCode)
			if res.Signal != "" {
				code = "was killed by " + res.Signal
			}
		}
		if s.timedOut.Load() {
			return nil, fail(reason.Timeout, "the plugin did not send its %s within %s", what, s.timeout)
		}
		return nil, fail(reason.Crashed, "the plugin %s before sending its %s", code, what)
	}
	return nil, fail(reason.Crashed, "reading the plugin's %s: %v", what, m.err)
}

// waitDone waits (bounded) for the plugin to be gone after it closed stdout.
func (s *session) waitDone() (*sandbox.Result, bool) {
	select {
	case <-s.proc.Done():
		res, _ := s.proc.Wait()
		return res, true
	case <-time.After(exitGrace):
		return nil, false
	}
}

func (s *session) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = s.proc.Stdin.Write(append(b, '\n'))
	return err
}

// converse runs one session: the handshake, then, for an execute run, the tool call.
func (s *session) converse(rs runSpec) *Outcome {
	out := &Outcome{}
	m, f := s.handshake(rs)
	if f != nil {
		out.Failure = f
		return out
	}
	out.Manifest = m
	if rs.phase != "execute" {
		return out
	}
	s.execute(rs, out)
	return out
}

// handshake sends the handshake, reads and checks the plugin's manifest, and records the
// outcome either way (every handshake, failed or not, is on the audit record).
func (s *session) handshake(rs runSpec) (*Manifest, *Failure) {
	allow := rs.allow
	if allow == nil {
		allow = []string{}
	}
	if err := s.send(HandshakeRequest{Type: "handshake", ProtocolVersion: ProtocolVersion, Tool: rs.tool, Capabilities: allow}); err != nil {
		// A plugin that is gone before the handshake was written: the read tells how.
		_, f := s.next("handshake")
		if f == nil {
			f = fail(reason.HandshakeFailed, "the plugin did not take the handshake: %v", err)
		}
		s.recordHandshake(rs, nil, f)
		return nil, f
	}
	line, f := s.next("handshake")
	if f != nil {
		s.recordHandshake(rs, nil, f)
		return nil, f
	}
	var hs struct {
		Type     string          `json:"type"`
		Manifest json.RawMessage `json:"manifest"`
	}
	var m Manifest
	switch err := decodeObject(line, &hs); {
	case err != nil:
		f = fail(reason.MalformedResponse, "the plugin's handshake is not valid: %v", err)
	case hs.Type != "handshake":
		f = fail(reason.MalformedResponse, "expected a handshake, the plugin sent type %q", clip.Bytes(hs.Type, 80))
	case len(hs.Manifest) == 0 || string(hs.Manifest) == "null":
		f = fail(reason.HandshakeFailed, "the plugin's handshake has no manifest")
	default:
		if err := decodeObject(hs.Manifest, &m); err != nil {
			f = fail(reason.MalformedResponse, "the plugin's handshake manifest is not valid: %v", err)
		} else {
			f = CheckManifest(&m, s.b.Entry.Name, rs.tool, rs.allow)
		}
	}
	if f != nil {
		s.recordHandshake(rs, &m, f)
		return nil, f
	}
	s.recordHandshake(rs, &m, nil)
	return &m, nil
}

// execute records the tool call, sends it and fills out from the plugin's reply.
func (s *session) execute(rs runSpec, out *Outcome) {
	input := rs.input
	if input == nil {
		input = json.RawMessage("{}")
	}
	// The call is on record, durably, before the plugin gets it.
	sync, err := s.rec.BeforeAct(audit.EventToolCall, map[string]any{
		"protocol": plugin.ProtocolRuntime, "tool": rs.tool, "capabilities": rs.allow, "input_bytes": len(input),
	})
	if err == nil && sync != nil {
		err = sync()
	}
	if err != nil {
		out.Failure = fail(reason.LaunchFailed, "the tool call was not sent: the audit log cannot record it: %v", err)
		return
	}
	if err := s.send(ExecuteRequest{Type: "execute", Tool: rs.tool, Input: input}); err != nil {
		if _, f := s.next("response"); f != nil {
			out.Failure = f
		} else {
			out.Failure = fail(reason.Crashed, "the plugin did not take the execute request: %v", err)
		}
		return
	}
	line, f := s.next("response")
	if f != nil {
		out.Failure = f
		return
	}
	var resp struct {
		Type   string          `json:"type"`
		Output json.RawMessage `json:"output"`
		Error  json.RawMessage `json:"error"`
	}
	if err := decodeObject(line, &resp); err != nil {
		out.Failure = fail(reason.MalformedResponse, "the plugin's response is not valid: %v", err)
		return
	}
	switch resp.Type {
	case "result":
		if len(resp.Output) == 0 {
			out.Failure = fail(reason.MalformedResponse, "the plugin's result has no output")
			return
		}
		out.Output = resp.Output
	case "error":
		var pe PluginError
		if err := decodeObject(resp.Error, &pe); err != nil || pe.Code == "" {
			out.Failure = fail(reason.MalformedResponse, "the plugin's error reply has no error object with a code")
			return
		}
		out.PluginError = &pe
	default:
		out.Failure = fail(reason.MalformedResponse, "expected a result or an error, the plugin sent type %q", clip.Bytes(resp.Type, 80))
	}
}

// expectEOF reads until the plugin's stdout ends: exactly one response was expected, so
// any further line is malformed_response. A plugin that does not exit once its stdin is
// closed is ended by the ladder.
func (s *session) expectEOF() *Failure {
	grace := time.AfterFunc(exitGrace, func() { s.proc.Stop("host", false, nil) })
	defer grace.Stop()
	for {
		m := <-s.lines
		switch {
		case m.err == nil || errors.Is(m.err, lines.ErrTooLong):
			_ = s.proc.Kill()
			return fail(reason.MalformedResponse, "the plugin sent another line after its one response")
		default:
			return nil
		}
	}
}

func (s *session) recordHandshake(rs runSpec, m *Manifest, f *Failure) {
	details := map[string]any{"protocol": plugin.ProtocolRuntime, "phase": rs.phase, "tool": rs.tool, "allow": rs.allow}
	if m != nil && m.PluginID != "" {
		details["plugin_id"], details["plugin_version"], details["protocol_version"] = m.PluginID, m.PluginVersion, m.ProtocolVersion
		details["exposed_tools"], details["capabilities"] = m.ExposedTools, m.Capabilities
	}
	if f == nil {
		s.rec.Record(audit.EventHandshake, audit.Allow, reason.OK, details, false)
		return
	}
	details["message"] = f.Msg
	s.rec.Record(audit.EventHandshake, audit.Deny, f.Code, details, true)
}

func (s *session) recordOutcome(out *Outcome) {
	details := map[string]any{"protocol": plugin.ProtocolRuntime, "exit_code": out.ExitCode}
	switch {
	case out.Failure != nil:
		details["message"] = out.Failure.Msg
		s.rec.Record(audit.EventToolOutcome, audit.Error, out.Failure.Code, details, true)
	case out.PluginError != nil:
		details["error_code"], details["message"] = out.PluginError.Code, clip.Bytes(out.PluginError.Message, 80)
		s.rec.Record(audit.EventToolOutcome, audit.Error, reason.ToolError, details, true)
	default:
		details["output_bytes"] = len(out.Output)
		s.rec.Record(audit.EventToolOutcome, audit.Allow, reason.OK, details, true)
	}
}
