// SPDX-License-Identifier: MIT

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// testHost is a JSON-RPC 2.0 host driving `fledge serve --protocol jsonrpc-2.0` over pipes.
type testHost struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	lines  chan string
}

// setupServeWorld makes a throwaway HOME/config/audit log and installs plugins into it.
func setupServeWorld(t *testing.T) (home string) {
	t.Helper()
	home = t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("FLEDGE_CONFIG_DIR", filepath.Join(home, ".config", "fledge"))
	t.Setenv("FLEDGE_AUDIT_LOG", filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"))
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("FLEDGE_NON_INTERACTIVE", "1")
	t.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin:"+os.Getenv("PATH"))
	return home
}

func fledgeMain(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	devnull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer devnull.Close()
	var out, errb bytes.Buffer
	code := Main(args, Streams{In: devnull, Out: &out, Err: &errb})
	return out.String(), errb.String(), code
}

func installExe(t *testing.T, path, grant string) {
	t.Helper()
	out, errOut, code := fledgeMain(t, "--ni", "plugins", "install", path, "--protocol", "jsonrpc-2.0", "--grant", grant)
	require.Equal(t, 0, code, "install %s: %s%s", path, out, errOut)
}

// fledgeBinary is a link named "fledge" to this test binary (testscript.Main runs Main
// when the binary is called by that name).
func fledgeBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	link := filepath.Join(t.TempDir(), "fledge")
	require.NoError(t, os.Symlink(exe, link))
	return link
}

func startServe(t *testing.T, dir string, args ...string) *testHost {
	t.Helper()
	cmd := exec.Command(fledgeBinary(t), append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outPipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	h := &testHost{t: t, cmd: cmd, in: in, stderr: &bytes.Buffer{}, lines: make(chan string, 16)}
	cmd.Stderr = h.stderr
	require.NoError(t, cmd.Start())
	h.out = bufio.NewReader(outPipe)
	go func() {
		defer close(h.lines)
		for {
			line, err := h.out.ReadString('\n')
			if line != "" {
				h.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return h
}

func (h *testHost) send(line string) {
	h.t.Helper()
	_, err := io.WriteString(h.in, line+"\n")
	require.NoError(h.t, err)
}

// answer reads the next answer (bounded wait: a hook chain may take 5 s per slow plugin).
func (h *testHost) answer() map[string]any {
	h.t.Helper()
	select {
	case line, ok := <-h.lines:
		require.True(h.t, ok, "fledge serve closed its output; stderr: %s", h.stderr.String())
		var m map[string]any
		require.NoError(h.t, json.Unmarshal([]byte(line), &m), "answer %q", line)
		assert.Equal(h.t, "2.0", m["jsonrpc"])
		return m
	case <-time.After(30 * time.Second):
		h.t.Fatalf("no answer from fledge serve in 30 s; stderr: %s", h.stderr.String())
	}
	return nil
}

func (h *testHost) call(id any, method string, params any) map[string]any {
	h.t.Helper()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params, "id": id})
	require.NoError(h.t, err)
	h.send(string(b))
	a := h.answer()
	want, _ := json.Marshal(id)
	got, _ := json.Marshal(a["id"])
	require.Equal(h.t, string(want), string(got), "ids are echoed")
	return a
}

func result(t *testing.T, a map[string]any) map[string]any {
	t.Helper()
	r, ok := a["result"].(map[string]any)
	require.True(t, ok, "want a result, got %v", a)
	return r
}

func errCode(t *testing.T, a map[string]any) float64 {
	t.Helper()
	e, ok := a["error"].(map[string]any)
	require.True(t, ok, "want an error, got %v", a)
	return e["code"].(float64)
}

// TestServeWholeSession drives fledge as one JSON-RPC 2.0 tool/hook plugin through a whole session: the
// handshake, tools of every plugin behind it, hook chains (a crash mid-session included),
// JSON-RPC errors, and shutdown of every plugin.
func TestServeWholeSession(t *testing.T) {
	_, jqErr := exec.LookPath("jq")
	testutil.SkipUnlessSupported(t, jqErr == nil, "jq is required for the JSON-RPC 2.0 spec's system-info plugin (.ci/run installs it)")
	home := setupServeWorld(t)
	seed, err := filepath.Abs(filepath.Join("testdata", "seed"))
	require.NoError(t, err)
	installExe(t, filepath.Join(seed, "system-info"), "")
	installExe(t, filepath.Join(seed, "git-context"), "filesystem=project")
	installExe(t, filepath.Join(seed, "audit-logger"), "")
	hostile, err := os.ReadFile(filepath.Join("testdata", "jsonrpc", "hostile"))
	require.NoError(t, err)
	bin := t.TempDir()
	for _, n := range []string{"toolbox", "crasher", "upper"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, n), hostile, 0o755))
		installExe(t, filepath.Join(bin, n), "")
	}
	proj := filepath.Join(t.TempDir(), "proj")
	require.NoError(t, exec.Command("git", "init", "-q", "-b", "serve-branch", proj).Run())

	h := startServe(t, proj, "--protocol", "jsonrpc-2.0", "--priority", "300")

	// initialize: one manifest named fledge, the union of hooks, every tool <plugin>_<tool>.
	man := result(t, h.call(1, "initialize", map[string]any{"protocol_version": 1}))
	assert.Equal(t, "fledge", man["name"])
	assert.Equal(t, float64(300), man["priority"])
	assert.Equal(t, []any{"context_enhance", "post_user_input", "pre_tool_execute"}, man["hooks"])
	var names []string
	var readTool map[string]any
	for _, x := range man["tools"].([]any) {
		tl := x.(map[string]any)
		names = append(names, tl["name"].(string))
		if tl["name"] == "toolbox_read" {
			readTool = tl
		}
	}
	assert.Contains(t, names, "system-info_uptime")
	assert.Contains(t, names, "toolbox_read")
	assert.NotContains(t, strings.Join(names, " "), "plugin_", "the host adds plugin_fledge_ itself")
	require.NotNil(t, readTool)
	assert.Equal(t, []any{map[string]any{"name": "path", "type": "string", "description": "file", "required": true}}, readTool["parameters"])

	// tool/execute routes to the right plugin.
	up := result(t, h.call(2, "tool/execute", map[string]any{"name": "system-info_uptime", "arguments": map[string]any{}}))
	assert.Equal(t, true, up["success"])
	assert.Regexp(t, `^up |load average`, up["result"])
	sum := result(t, h.call("three", "tool/execute", map[string]any{"name": "toolbox_add", "arguments": map[string]any{"a": 2, "b": 40}}))
	assert.Equal(t, map[string]any{"success": true, "result": float64(42)}, sum)
	ssh := result(t, h.call(4, "tool/execute", map[string]any{"name": "toolbox_read", "arguments": map[string]any{"path": filepath.Join(home, ".config", "fledge", "plugins.toml")}}))
	assert.Equal(t, false, ssh["success"])
	// Out of reach: absent in the private view (errno 2), or refused by Landlock (errno 13).
	assert.Regexp(t, `errno (2|13)`, ssh["result"])

	// Bad params, unknown tools, bad argument types: -32602. Unknown methods: -32601. Bad
	// JSON: -32700 with a null id.
	assert.Equal(t, float64(-32602), errCode(t, h.call(5, "tool/execute", map[string]any{"arguments": map[string]any{}})))
	unknown := h.call(6, "tool/execute", map[string]any{"name": "nope_nope"})
	assert.Equal(t, float64(-32602), errCode(t, unknown))
	assert.Equal(t, `Invalid params: unknown tool "nope_nope"`, unknown["error"].(map[string]any)["message"])
	assert.Equal(t, float64(-32602), errCode(t, h.call(7, "tool/execute", map[string]any{"name": "toolbox_add", "arguments": map[string]any{"a": "x"}})))
	assert.Equal(t, float64(-32601), errCode(t, h.call(8, "frobnicate", map[string]any{})))
	h.send(`{"jsonrpc":"2.0","method":`)
	bad := h.answer()
	assert.Equal(t, float64(-32700), errCode(t, bad))
	assert.Nil(t, bad["id"])

	// Hooks: the chain with the spec's rules. git-context adds the branch.
	ctx := result(t, h.call(9, "hook/context_enhance", map[string]any{"user_message": "u", "dynamic_context": "base"}))
	assert.Equal(t, "base\n\n# Git Context\nBranch: serve-branch\n", ctx["dynamic_context"])
	// crasher (300) dies mid-chain; upper (400) still runs.
	in := result(t, h.call(10, "hook/post_user_input", map[string]any{"message": "hello"}))
	assert.Equal(t, map[string]any{"action": "continue", "message": "HELLO"}, in)
	in = result(t, h.call(11, "hook/post_user_input", map[string]any{"message": "again"}))
	assert.Equal(t, "AGAIN", in["message"], "a crashed plugin stays skipped; the chain goes on")
	pre := result(t, h.call(12, "hook/pre_tool_execute", map[string]any{"tool_name": "write_file", "arguments": "{}"}))
	assert.Equal(t, "continue", pre["action"])
	logged, err := os.ReadFile(filepath.Join(home, ".config", "fledge", "plugins", "audit-logger", "data", ".local", "scaffold", "audit.log"))
	require.NoError(t, err)
	assert.Contains(t, string(logged), "TOOL write_file {}")

	// shutdown: every plugin is shut down, then fledge answers and exits.
	assert.Equal(t, map[string]any{"ok": true}, result(t, h.call(13, "shutdown", map[string]any{})))
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", h.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("fledge serve did not exit after shutdown")
	}
	assert.Contains(t, h.stderr.String(), "hook post_user_input: plugin crasher skipped for this event")

	// Every plugin that started was shut down: one plugin_exit per plugin_start.
	started, exited := map[string]int{}, map[string]int{}
	require.NoError(t, audit.Read(filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		switch {
		case r.Event == audit.EventPluginStart && r.Decision == audit.Allow:
			started[r.Session]++
		case r.Event == audit.EventPluginExit:
			exited[r.Session]++
		}
		return nil
	}))
	assert.Len(t, started, 6+6, "six install probes and six serve sessions")
	assert.Equal(t, started, exited)
}

// TestServeSIGTERM: the host's shutdown ladder (SIGTERM) ends fledge serve even while it
// waits for the host, and fledge shuts its plugins down first.
func TestServeSIGTERM(t *testing.T) {
	home := setupServeWorld(t)
	hostile, err := os.ReadFile(filepath.Join("testdata", "jsonrpc", "hostile"))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "toolbox")
	require.NoError(t, os.WriteFile(bin, hostile, 0o755))
	installExe(t, bin, "")

	// The priority fledge announces comes from config when --priority is not given.
	require.NoError(t, os.WriteFile(filepath.Join(home, ".config", "fledge", "config.toml"), []byte("[serve]\npriority = 7\n"), 0o600))
	h := startServe(t, t.TempDir(), "--protocol", "jsonrpc-2.0")
	man := result(t, h.call(1, "initialize", map[string]any{"protocol_version": 1}))
	assert.Equal(t, float64(7), man["priority"])
	r := result(t, h.call(2, "tool/execute", map[string]any{"name": "toolbox_home", "arguments": map[string]any{}}))
	assert.Equal(t, filepath.Join(home, ".config", "fledge", "plugins", "toolbox", "data"), r["result"])

	require.NoError(t, h.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, ExitInterrupted, ee.ExitCode())
	case <-time.After(30 * time.Second):
		t.Fatal("fledge serve ignored SIGTERM")
	}
	var exits []string
	require.NoError(t, audit.Read(filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		if r.Event == audit.EventPluginExit && r.Details["stopped_by"] == "shutdown" {
			exits = append(exits, r.Plugin.Name)
		}
		return nil
	}))
	assert.Equal(t, []string{"toolbox", "toolbox"}, exits, "the install probe and the serve session both ended with shutdown")
}
