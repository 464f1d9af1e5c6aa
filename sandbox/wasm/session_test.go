// SPDX-License-Identifier: MIT

package wasm_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/sandbox/wasm"
	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/fledgehq/fledge/ui"
)

// fixture runs a WASM guest through the real fledge-v1 session (fledgev1.Run) the way
// cmd/fledge wires a wasm plugin: the plugin starts in package wasm, its execs and git calls go
// through the platform sandbox, every decision is in a real audit log.
type fixture struct {
	t         testing.TB
	root      string
	home      string
	project   string
	pluginDir string
	dataDir   string
	auditPath string
	stdout    *testutil.SyncBuffer
	stderr    *testutil.SyncBuffer
	opts      fledgev1.Options
	wopts     wasm.Options
}

func newFixture(t testing.TB, module string, grants protocol.Capabilities) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{
		t: t, root: root,
		home:    filepath.Join(root, "home"),
		project: filepath.Join(root, "work", "proj"),
		stdout:  &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{},
	}
	configDir := filepath.Join(f.home, ".config", "fledge")
	stateDir := filepath.Join(f.home, ".local", "state", "fledge")
	f.pluginDir = filepath.Join(configDir, "plugins", "wp")
	f.dataDir = filepath.Join(f.pluginDir, "data")
	f.auditPath = filepath.Join(stateDir, "audit.jsonl")
	for _, d := range []string{f.home, f.project, f.dataDir, stateDir} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(f.project, "fledge.toml"), []byte("[project]\nname = \"proj\"\n"), 0o644))
	src, err := os.ReadFile(guest(t, module))
	require.NoError(t, err)
	program := filepath.Join(f.pluginDir, module+".wasm")
	require.NoError(t, os.WriteFile(program, src, 0o644))

	sb, err := platform.New(platform.Options{})
	require.NoError(t, err)
	if c, ok := sb.(io.Closer); ok {
		t.Cleanup(func() { assert.NoError(t, c.Close(), "sandbox cleanup") })
	}
	log, err := audit.Open(f.auditPath, audit.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })
	proj, err := project.Detect(f.project, "")
	require.NoError(t, err)

	cfg := policy.Default()
	paths := policy.Paths{
		ProjectRoot: f.project, PluginDir: f.pluginDir, PluginDataDir: f.dataDir,
		ConfigDir: configDir, StateDir: stateDir, AuditLog: f.auditPath,
		UserPATH: []string{"/usr/local/bin", "/usr/bin", "/bin"}, Home: f.home,
	}
	environ := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.home, "LANG=C.UTF-8", "GITHUB_TOKEN=ghp_secret"}
	store, err := plugin.OpenStore(filepath.Join(f.pluginDir, "state.json"), plugin.DefaultStoreLimits)
	require.NoError(t, err)
	// One compilation cache for every test of this binary: each guest is compiled once.
	f.wopts = wasm.Options{Grants: grants, ProjectRoot: f.project, DataDir: f.dataDir, CacheDir: filepath.Join(guestDir, "cache")}
	f.opts = fledgev1.Options{
		SessionID: "wasm-session", FledgeVersion: "test",
		Plugin:  fledgev1.PluginMeta{Name: "wp", Version: "1.0.0", Dir: f.pluginDir, DataDir: f.dataDir, Source: "testdata"},
		Command: "wp", Program: program, Grants: grants, Project: proj,
		InitProject: &protocol.Project{Name: "proj", Root: f.project},
		UI:          ui.New(ui.Options{Out: f.stdout, Err: f.stderr, NonInteractive: true}),
		Sandbox:     sb, Audit: log, Store: store, Stderr: f.stderr,
		PluginSpec: sandbox.Spec{Limits: cfg.PluginLimits()},
		PluginCwd:  f.dataDir,
		ExecSpec: sandbox.Spec{
			Env: policy.ChildEnv(environ, nil, nil), Access: policy.ExecAccess(paths, cfg),
			Limits: cfg.ExecLimits(),
		},
		ExecRoots:   []string{f.project, f.pluginDir},
		GitAccess:   policy.GitAccess(paths),
		MetadataEnv: policy.MetadataEnv(environ, nil),
		Limits:      fledgev1.Limits{CancelGrace: 300 * time.Millisecond, KillAfter: time.Second, PromptTimeout: 5 * time.Second},
	}
	return f
}

// run starts the session; the wasm runtime is made from f.wopts as cmd/fledge makes it.
func (f *fixture) run(args ...string) (*fledgev1.Outcome, error) {
	f.t.Helper()
	w, err := wasm.New(f.wopts)
	require.NoError(f.t, err)
	defer w.Close()
	details, err := w.Describe(f.opts.Program)
	require.NoError(f.t, err)
	f.opts.PluginSandbox = w
	f.opts.PluginStartDetails = details
	f.opts.Args = args
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	return fledgev1.Run(ctx, f.opts)
}

func (f *fixture) mustRun(args ...string) *fledgev1.Outcome {
	f.t.Helper()
	out, err := f.run(args...)
	require.NoError(f.t, err, "stderr:\n%s", f.stderr.String())
	require.NotNil(f.t, out)
	return out
}

// report decodes the last JSON line the guest printed.
func (f *fixture) report() map[string]any {
	f.t.Helper()
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	var m map[string]any
	require.NoError(f.t, json.Unmarshal([]byte(lines[len(lines)-1]), &m), "stdout:\n%s\nstderr:\n%s", f.stdout.String(), f.stderr.String())
	return m
}

func (f *fixture) records(event string) []*audit.Record {
	f.t.Helper()
	var out []*audit.Record
	require.NoError(f.t, audit.Read(f.auditPath, func(r *audit.Record) error {
		if event == "" || r.Event == event {
			out = append(out, r)
		}
		return nil
	}))
	return out
}

func allGrants(fs string) protocol.Capabilities {
	return protocol.Capabilities{Exec: true, Store: true, Metadata: true, Filesystem: fs}
}

func TestHelloThroughSession(t *testing.T) {
	f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "none"})
	out := f.mustRun("hello")
	assert.Equal(t, 0, out.ExitCode)
	assert.Equal(t, "hello from wasm\nstdout: h\u00e9llo w\u00f6rld\n", f.stdout.String())

	starts := f.records(audit.EventPluginStart)
	require.Len(t, starts, 1)
	d := starts[0].Details
	assert.Equal(t, "wasm", d["runtime"])
	sum := sha256File(t, f.opts.Program)
	assert.Equal(t, sum, d["module_sha256"])
	assert.Equal(t, json.Number(strconv.Itoa(wasm.DefaultMemoryBytes)), d["memory_bytes"])
	assert.Equal(t, json.Number(strconv.FormatInt(wasm.DefaultTimeout.Milliseconds(), 10)), d["timeout_ms"])
	assert.Equal(t, []any{}, d["preopens"])
	assert.Equal(t, []any{"exit", "recv", "send"}, d["host_functions"])
	prof := d["profile"].(map[string]any)
	assert.Equal(t, "wasm", prof["confinement"])
	assert.Equal(t, "none", prof["network"])
	assert.Nil(t, prof["read_write"], "the native plugin profile is replaced")
	exits := f.records(audit.EventPluginExit)
	require.Len(t, exits, 1)
	assert.Equal(t, "ok", exits[0].Reason)
}

func TestEveryMessageType(t *testing.T) {
	f := newFixture(t, "probe", allGrants("plugin"))
	out := f.mustRun("messages")
	assert.Equal(t, 0, out.ExitCode)
	stdout := f.stdout.String()
	for _, want := range []string{"out-1\n", "pretty\n", "via-stdout\n"} {
		assert.Contains(t, stdout, want)
	}
	assert.NotContains(t, stdout, "reserved id")
	stderr := f.stderr.String()
	assert.Contains(t, stderr, "malformed message dropped")
	assert.Contains(t, stderr, `reserved id "fledge-wasm-1"`)
	assert.Contains(t, stderr, "log-1")

	rep := f.report()
	assert.EqualValues(t, 0, rep["empty_recv"], "recv with nothing pending returns 0")
	replies := rep["replies"].(map[string]any)
	get := func(id string) map[string]any {
		r, ok := replies[id].(map[string]any)
		require.True(t, ok, "no reply for %s: %v", id, replies)
		return r
	}
	// The store sent with send reached the real store; load reads it back.
	assert.Equal(t, map[string]any{"type": "response", "id": "l1", "value": "v1"}, get("l1"))
	// Non-interactive: a prompt and a select without a default are cancelled; a confirm
	// answers its default (false) and a multi-select its defaults (none), as for any plugin.
	for _, id := range []string{"p1", "s1"} {
		r := get(id)
		assert.Equal(t, "cancel", r["type"], id)
		assert.Equal(t, protocol.CancelNonInteractive, r["reason"], id)
	}
	assert.Equal(t, false, get("c1")["value"])
	assert.Equal(t, []any{}, get("m1")["value"])
	md := get("md1")["value"].(map[string]any)
	assert.Contains(t, md, "fledge_config")
	ex := get("e1")["value"].(map[string]any)
	assert.EqualValues(t, 0, ex["code"])
	assert.Equal(t, "from-exec\n", ex["stdout"])

	// The exec went through the session's exec path: decision and outcome on record.
	decisions := f.records(audit.EventExecDecision)
	require.Len(t, decisions, 1)
	assert.Equal(t, audit.Allow, decisions[0].Decision)
	assert.Equal(t, "echo from-exec", decisions[0].Details[audit.DetailCommand])
	require.Len(t, f.records(audit.EventExecOutcome), 1)
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"exit", "0"}, 0},
		{[]string{"exit", "3"}, 3},
		{[]string{"return"}, 0},
		{[]string{"panic"}, 2}, // Go's runtime exits 2 after a panic
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "none"})
			out := f.mustRun(tc.args...)
			assert.Equal(t, tc.code, out.ExitCode)
			exits := f.records(audit.EventPluginExit)
			require.Len(t, exits, 1)
			assert.Equal(t, json.Number(strconv.Itoa(tc.code)), exits[0].Details[audit.DetailExitCode])
		})
	}
}

func TestHostFunctions(t *testing.T) {
	t.Run("exec", func(t *testing.T) {
		f := newFixture(t, "hostfn", allGrants("none"))
		f.mustRun("exec", "echo hi; echo oops >&2; exit 4", "")
		rep := f.report()
		reply := rep["reply"].(map[string]any)
		assert.EqualValues(t, 4, reply["code"])
		assert.Equal(t, "hi\n", reply["stdout"])
		assert.Equal(t, "oops\n", reply["stderr"])
		assert.Equal(t, rep["returned"], rep["received"], "exec returns the reply's length")
		dec := f.records(audit.EventExecDecision)
		require.Len(t, dec, 1)
		assert.Equal(t, audit.Allow, dec[0].Decision)
	})
	t.Run("exec cwd outside the project is refused by pathguard", func(t *testing.T) {
		f := newFixture(t, "hostfn", allGrants("none"))
		f.mustRun("exec", "cat passwd", "/etc")
		reply := f.report()["reply"].(map[string]any)
		assert.NotEqualValues(t, 0, reply["code"])
		assert.Empty(t, reply["stdout"])
		refused := f.records(audit.EventCwdRefused)
		require.Len(t, refused, 1)
		assert.Equal(t, audit.Deny, refused[0].Decision)
		assert.Equal(t, "path_escape", refused[0].Reason)
		assert.Empty(t, f.records(audit.EventExecOutcome), "nothing ran")
	})
	t.Run("store", func(t *testing.T) {
		f := newFixture(t, "hostfn", allGrants("none"))
		f.mustRun("store")
		rep := f.report()
		assert.Equal(t, "\"teal\"\n", rep["value"])
		assert.EqualValues(t, len("\"teal\"\n"), rep["returned"])
		assert.Equal(t, "null\n", rep["missing"])
		data, err := os.ReadFile(filepath.Join(f.pluginDir, "state.json"))
		require.NoError(t, err)
		assert.Contains(t, string(data), `"color"`)
	})
	t.Run("metadata", func(t *testing.T) {
		f := newFixture(t, "hostfn", allGrants("none"))
		f.mustRun("metadata")
		rep := f.report()
		reply := rep["reply"].(map[string]any)
		assert.Contains(t, reply, "fledge_config")
		env := reply["env"].(map[string]any)
		assert.Equal(t, "C.UTF-8", env["LANG"])
		assert.NotContains(t, env, "GITHUB_TOKEN")
		md := f.records(audit.EventMetadata)
		require.Len(t, md, 1)
		assert.Equal(t, audit.Allow, md[0].Decision)
	})
}

func TestUngrantedImportRefusedAtStart(t *testing.T) {
	f := newFixture(t, "hostfn", protocol.Capabilities{Filesystem: "none"})
	out, err := f.run("exec", "echo no", "")
	require.Error(t, err)
	assert.Nil(t, out)
	assert.ErrorIs(t, err, fledgev1.ErrLaunch)
	assert.Contains(t, err.Error(), "capability")
	assert.Empty(t, f.records(audit.EventExecDecision))
	exits := f.records(audit.EventPluginExit)
	require.Len(t, exits, 1)
	assert.Equal(t, false, exits[0].Details["started"])
}

func TestReplyLargerThanGuestBuffer(t *testing.T) {
	t.Run("send exec", func(t *testing.T) {
		f := newFixture(t, "probe", allGrants("none"))
		f.mustRun("bigreply", "head -c 300000 /dev/zero | tr '\\0' a")
		rep := f.report()
		assert.Equal(t, "ok", rep["parse"])
		assert.EqualValues(t, 300000, rep["stdout_len"])
		assert.Greater(t, rep["len"].(float64), 300000.0)
		assert.Greater(t, rep["calls"].(float64), 300.0, "a 1000-byte buffer takes many recv calls")
	})
	t.Run("host exec", func(t *testing.T) {
		f := newFixture(t, "hostfn", allGrants("none"))
		f.mustRun("exec", "head -c 200000 /dev/zero | tr '\\0' b", "", "700")
		rep := f.report()
		assert.Equal(t, "<nil>", rep["parse_error"])
		assert.Equal(t, rep["returned"], rep["received"])
		assert.Greater(t, rep["calls"].(float64), 200000.0/700)
		assert.Len(t, rep["reply"].(map[string]any)["stdout"], 200000)
	})
}

func TestTimeBound(t *testing.T) {
	for _, mode := range []string{"loop", "sleep"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "none"})
			f.wopts.Timeout = 2 * time.Second
			out := f.mustRun(mode)
			require.NotNil(t, out.Result)
			assert.True(t, out.Result.TimedOut)
			assert.NotEqual(t, 0, out.ExitCode)
			assert.Contains(t, f.stderr.String(), "ran longer than its 2s limit")
			exits := f.records(audit.EventPluginExit)
			require.Len(t, exits, 1)
			assert.Equal(t, "timeout", exits[0].Reason)
			assert.Equal(t, true, exits[0].Details[audit.DetailTimedOut])
		})
	}
}

func TestMemoryBound(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "probe", protocol.Capabilities{Filesystem: "none"})
	f.wopts.MemoryBytes = 64 << 20
	out := f.mustRun("memhog")
	require.NotNil(t, out.Result)
	assert.True(t, out.Result.OOMKilled)
	assert.NotEqual(t, 0, out.ExitCode)
	assert.LessOrEqual(t, out.Result.PeakMemory, int64(64<<20))
	exits := f.records(audit.EventPluginExit)
	require.Len(t, exits, 1)
	assert.Equal(t, "oom_killed", exits[0].Reason)
}
