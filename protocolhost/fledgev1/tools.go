// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// ErrPromptRefused: a command run as a tool asked a question that has no default; nobody
// can answer it, so the call fails.
var ErrPromptRefused = errors.New("the command asked a question without a default")

// FledgeV1Provider offers the fledge-v1 commands that declare typed args
// ([[commands.args]] in plugin.toml) as tools. A call runs the command once,
// non-interactively, through the normal fledge-v1 session (Run): the same
// sandbox, grants, limits and audit as `fledge <command>`. Its `output` messages are the
// result; questions are answered as under --ni, and a prompt or select without a default
// fails the call.
//
// Typed args reach the command as its argv, in declaration order: `--name=value` for a
// string or number, `--name` for a boolean true (nothing for false); an argument left out
// takes its declared default, if any.
type FledgeV1Provider struct {
	host *tools.Host
}

// NewFledgeV1Provider is the fledge-v1 tools provider for one fledge invocation.
func NewFledgeV1Provider(h *tools.Host) *FledgeV1Provider { return &FledgeV1Provider{host: h} }

// Tools lists the commands with typed args, native or WebAssembly alike.
func (p *FledgeV1Provider) Tools(ctx context.Context, b *core.Binding) ([]tools.Tool, error) {
	var out []tools.Tool
	for _, c := range b.Manifest.Commands {
		if len(c.Args) == 0 {
			continue
		}
		t := tools.Tool{
			Name: tools.PublicName(b.Entry.Name, c.Name), Plugin: b.Entry.Name, Tool: c.Name,
			Protocol: plugin.ProtocolFledgeV1, Description: c.Description,
		}
		for _, a := range c.Args {
			t.Params = append(t.Params, tools.Param{Name: a.Name, Type: a.Type, Description: a.Description, Required: a.Required})
		}
		out = append(out, t)
	}
	return out, nil
}

// Argv turns typed arguments into the command's argv (see FledgeV1Provider).
func Argv(decl []plugin.Arg, args map[string]any) ([]string, error) {
	var argv []string
	for _, a := range decl {
		v, ok := args[a.Name]
		if !ok || v == nil {
			if a.Default == nil {
				continue
			}
			v = a.Default
		}
		switch x := v.(type) {
		case bool:
			if x {
				argv = append(argv, "--"+a.Name)
			}
		case string:
			argv = append(argv, "--"+a.Name+"="+x)
		case float64:
			argv = append(argv, "--"+a.Name+"="+strconv.FormatFloat(x, 'f', -1, 64))
		case int64:
			argv = append(argv, "--"+a.Name+"="+strconv.FormatInt(x, 10))
		case int:
			argv = append(argv, "--"+a.Name+"="+strconv.Itoa(x))
		case json.Number:
			argv = append(argv, "--"+a.Name+"="+x.String())
		default:
			return nil, fmt.Errorf("%w: argument %q: a %s cannot be passed on a command line", tools.ErrBadArguments, a.Name, tools.JSONType(v))
		}
	}
	return argv, nil
}

// Call runs the command once with args and returns its output.
func (p *FledgeV1Provider) Call(ctx context.Context, b *core.Binding, t tools.Tool, args map[string]any) (*tools.Result, error) {
	env := p.host.Env
	cmd := b.Manifest.Command(t.Tool)
	if cmd == nil || len(cmd.Args) == 0 {
		return nil, fmt.Errorf("%w %q", tools.ErrUnknownTool, t.Name)
	}
	argv, err := Argv(cmd.Args, args)
	if err != nil {
		return nil, err
	}
	program, err := env.Program(b, cmd.Binary)
	if err != nil {
		return nil, err
	}
	log, err := env.Audit()
	if err != nil {
		return nil, err
	}
	stderr := p.host.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	// A tool call is non-interactive: the plugin may skip its questions up front.
	prof := env.Profile(b, os.Environ(), b.PluginEnv(cmd.Name, true), nil)
	cap := newCaptureUI(b.Entry.Name, stderr, prof.Session.OutputCap)
	cap.redact = env.Redactor().Redact
	rec := env.NewRecorder(log, b.Ref, cap.Warn)

	store := openToolStore(env, b, cap)
	cwd := b.StartDir("", prof.Plugin.Access)

	if err := recordToolCall(rec, t, args, env.Config.Audit.ToolArgumentValues); err != nil {
		return nil, err
	}

	// The call is bounded like an exec (policy's timeout rule, the plugin's own timeout
	// within it); cancelling it runs the plugin's stop ladder (cancel, TERM, KILL).
	timeout, terr := policy.CallTimeout(b.Manifest.Plugin.Timeout, prof.Session)
	if terr != nil {
		cap.Warn(fmt.Sprintf("plugin %s: %v", b.Entry.Name, terr))
	}
	if d, ok := tools.CallTimeout(ctx); ok {
		timeout = d // fledge tools call --timeout, already within policy's maximum
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sigs, runDone := termOnDone(cctx)

	start := time.Now()
	opts := SessionOptions(ctx, env, b, prof, log, rec, core.FledgeVersion())
	opts.Command, opts.Program, opts.Args = cmd.Name, program, argv
	opts.UI, opts.Store, opts.Stderr, opts.PluginCwd = cap, store, stderr, cwd
	opts.Signals = sigs
	var out *Outcome
	var runErr error
	if b.Manifest.IsWasm() {
		// The same runtime as `fledge <command>` (WasmRuntime): grants become preopens.
		w, err := WasmRuntime(env, b, program, &opts)
		if err != nil {
			runErr = err
		} else {
			defer w.Close()
		}
	}
	if runErr == nil {
		out, runErr = Run(ctx, opts)
	}
	close(runDone)
	return toolOutcome(ctx, cctx, rec, cap, t, timeout, time.Since(start), out, runErr), nil
}

// openToolStore opens the plugin's state store when it is granted one; a store that will
// not open is a warning, not a failed call, as the plugin may not need it.
func openToolStore(env *core.Env, b *core.Binding, cap *captureUI) StateStore {
	var store StateStore
	if b.Entry.Granted.Store {
		st, err := plugin.OpenStore(plugin.StatePath(env.ConfigDir, b.Entry.Name), plugin.DefaultStoreLimits)
		if err != nil {
			cap.Warn(fmt.Sprintf("plugin storage unavailable: %v", err))
		} else {
			store = st
		}
	}
	return store
}

// recordToolCall puts the call on record, durably, before the plugin starts.
func recordToolCall(rec *core.Recorder, t tools.Tool, args map[string]any, argValues bool) error {
	sync, err := rec.BeforeAct(audit.EventToolCall, tools.CallDetails(t, args, argValues))
	if err != nil {
		return fmt.Errorf("%w: %w", core.ErrAudit, err)
	}
	if sync != nil {
		if err := sync(); err != nil {
			return fmt.Errorf("%w: %w", core.ErrAudit, err)
		}
	}
	return nil
}

// termOnDone returns the session's signal channel, which gets SIGTERM when cctx ends
// before runDone is closed: that is how a timeout or a cancel starts the stop ladder.
func termOnDone(cctx context.Context) (chan os.Signal, chan struct{}) {
	sigs := make(chan os.Signal, 2)
	runDone := make(chan struct{})
	go func() {
		select {
		case <-cctx.Done():
			sigs <- syscall.SIGTERM
		case <-runDone:
		}
	}()
	return sigs, runDone
}

// toolOutcome turns the finished run into the caller's result (the first cause that
// applies names it) and records it as the call's outcome.
func toolOutcome(ctx, cctx context.Context, rec *core.Recorder, cap *captureUI, t tools.Tool, timeout, elapsed time.Duration, out *Outcome, runErr error) *tools.Result {
	details := map[string]any{"tool": t.Name, audit.DetailDurationMS: elapsed.Milliseconds()}
	text, truncated := cap.output()
	details["result_bytes"] = len(text)
	details[audit.DetailOutputTruncate] = truncated
	res := &tools.Result{Output: mustJSON(text), Reason: reason.OK}
	switch {
	case runErr != nil && out == nil:
		res.Reason, res.Message = reason.LaunchFailed, runErr.Error()
	case cap.refused() != "":
		res.Reason = reason.NonInteractive
		res.Message = fmt.Sprintf("%v: %s (tools run non-interactively; pass the answer as an argument)", ErrPromptRefused, cap.refused())
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		res.Reason, res.Message = reason.Timeout, fmt.Sprintf("%s did not finish within %s", t.Name, timeout)
	case ctx.Err() != nil:
		res.Reason, res.Message = reason.Cancelled, "the call was cancelled"
	case out.ExitCode != 0:
		res.Message = fmt.Sprintf("%s exited with status %d", t.Name, out.ExitCode)
	default:
		res.Success = true
	}
	if out != nil {
		details[audit.DetailExitCode] = out.ExitCode
	}
	d, rc := audit.Allow, res.Reason
	switch {
	case rc != reason.OK:
		d = audit.Error
		details["error"] = res.Message
	case !res.Success:
		d, rc = audit.Error, reason.ToolError
		details["error"] = res.Message
	}
	rec.Record(audit.EventToolOutcome, d, rc, details, true)
	return res
}

// Close has nothing to end: each call is its own session.
func (p *FledgeV1Provider) Close() error { return nil }

func mustJSON(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// captureUI is the UI of a command run as a tool: output is collected (bounded), logs and
// warnings go to stderr, questions are answered as under --ni (their default; confirm
// false, multi_select none), and a prompt or select without a default fails the call.
type captureUI struct {
	plugin string
	stderr io.Writer
	max    int
	// redact takes the secret values the call's plugin was handed out of fledge's warnings.
	redact func(string) string

	mu        sync.Mutex
	out       strings.Builder
	truncated bool
	refusedQ  string
}

func newCaptureUI(pluginName string, stderr io.Writer, max int) *captureUI {
	if max <= 0 {
		max = 10 << 20
	}
	return &captureUI{plugin: pluginName, stderr: stderr, max: max}
}

func (c *captureUI) output() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String(), c.truncated
}

func (c *captureUI) refused() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refusedQ
}

func (c *captureUI) refuse(kind, msg string) error {
	c.mu.Lock()
	if c.refusedQ == "" {
		c.refusedQ = fmt.Sprintf("%s %q", kind, ui.Clip(ui.Sanitize(msg), 200))
	}
	c.mu.Unlock()
	return ui.ErrNonInteractive
}

func (c *captureUI) Interactive() bool { return false }

func (c *captureUI) Prompt(ctx context.Context, req ui.PromptRequest) (string, error) {
	check, err := ui.Validator(req.Validate)
	if err != nil {
		return "", err
	}
	if req.Default != nil {
		return ui.DefaultAnswer(req, check)
	}
	return "", c.refuse("prompt", req.Message)
}

// Confirm and MultiSelect answer as `fledge --ni` does without a default (false, none):
// the safe answer exists. A prompt or select without one has no safe answer: refused.
func (c *captureUI) Confirm(ctx context.Context, _, message string, def *bool) (bool, error) {
	if def != nil {
		return *def, nil
	}
	return false, nil
}

func (c *captureUI) Select(ctx context.Context, _, message string, options []string, def *int) (int, error) {
	if def != nil && *def >= 0 && *def < len(options) {
		return *def, nil
	}
	return 0, c.refuse("select", message)
}

func (c *captureUI) MultiSelect(ctx context.Context, _, message string, options []string, defaults []int) ([]int, error) {
	out := append([]int{}, defaults...)
	sort.Ints(out)
	return out, nil
}

func (c *captureUI) Progress(string, string, *float64, *float64, bool) {}

func (c *captureUI) Log(pluginName, level, message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.stderr, "[%s] %s: %s\n", ui.Sanitize(pluginName), ui.Sanitize(level), ui.Sanitize(message))
}

func (c *captureUI) Output(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.out.Len()
	if room <= 0 {
		c.truncated = true
		return
	}
	if len(text) > room {
		text = text[:room]
		c.truncated = true
	}
	c.out.WriteString(text)
}

func (c *captureUI) Warn(message string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.redact != nil {
		message = c.redact(message)
	}
	fmt.Fprintf(c.stderr, "fledge: warning: %s\n", ui.Sanitize(message))
}

func (c *captureUI) Close() {}

func init() {
	tools.Register(plugin.ProtocolFledgeV1, func(h *tools.Host) tools.Provider { return NewFledgeV1Provider(h) })
}
