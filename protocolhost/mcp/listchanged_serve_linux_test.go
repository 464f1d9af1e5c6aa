// SPDX-License-Identifier: MIT

package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
)

// listedTool is one tool as the TypeScript client listed it.
type listedTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// listStep is one line of testdata/ts_listchanged.mjs.
type listStep struct {
	Capabilities struct {
		Tools *struct {
			ListChanged bool `json:"listChanged"`
		} `json:"tools"`
	} `json:"capabilities"`
	Before []listedTool `json:"before"`
	Call   *struct {
		Thrown  string `json:"thrown"`
		IsError bool   `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"call"`
	Notified bool         `json:"notified"`
	After    []listedTool `json:"after"`
}

func toolNames(ts []listedTool) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// watchingClient is the official TypeScript client connected to `fledge serve --mcp` in
// f's world, running testdata/ts_listchanged.mjs: it has called tool and waited for the
// tool list to change; next makes it wait for one more change.
type watchingClient struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan string
	cmd   *exec.Cmd
}

func startWatchingClient(t *testing.T, f *fixture, fledge, sdk, tool string) (*watchingClient, *listStep) {
	t.Helper()
	clientDir := filepath.Join(f.base, "client")
	copyFile(t, filepath.Join("testdata", "ts_listchanged.mjs"), filepath.Join(clientDir, "ts_listchanged.mjs"), 0o755)
	require.NoError(t, os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(clientDir, "node_modules")))
	args, _ := json.Marshal([]string{"--project", f.project, "serve", "--mcp"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, nodePath(t), filepath.Join(clientDir, "ts_listchanged.mjs"), fledge, string(args), tool)
	cmd.Dir = f.project
	cmd.Env = append(os.Environ(), "FLEDGE_CONFIG_DIR="+f.configDir, "FLEDGE_AUDIT_LOG="+f.auditPath)
	cmd.Stderr = f.stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &watchingClient{t: t, stdin: stdin, lines: make(chan string, 4), cmd: cmd}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	return c, c.step()
}

// step is the client's next report (bounded: the client gives up waiting after 15 s).
func (c *watchingClient) step() *listStep {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		require.True(c.t, ok, "the client ended early")
		var s listStep
		require.NoError(c.t, json.Unmarshal([]byte(line), &s), line)
		return &s
	case <-time.After(60 * time.Second):
		c.t.Fatal("the client said nothing within 60s")
		return nil
	}
}

// next has the client wait for one more change of the tool list and list again.
func (c *watchingClient) next() *listStep {
	c.t.Helper()
	_, err := io.WriteString(c.stdin, "next\n")
	require.NoError(c.t, err)
	return c.step()
}

// A rug pull in the middle of a session with a connected client: the MCP server behind
// fledge describes a tool anew (an instruction to the model), drops one and adds one, and
// says so. fledge quarantines the changed tool and holds back the new one at once (on
// record), and the client is told (notifications/tools/list_changed): its next tools/list
// has neither, nor the dropped one. Approved from another terminal, both come back, and
// the client is told again.
func TestServeMCPClientToldOfRugPull(t *testing.T) {
	sdk := npmInstall(t, pkgSDK)
	fledge := buildFledge(t)
	f := hostile(t, "rugpull")
	c, s := startWatchingClient(t, f, fledge, sdk, "plugin_hostile-rugpull_poke")
	require.NotNil(t, s.Capabilities.Tools)
	assert.True(t, s.Capabilities.Tools.ListChanged, "fledge says it tells the client of changes")
	assert.Equal(t, []string{"plugin_hostile-rugpull_gone", "plugin_hostile-rugpull_poke", "plugin_hostile-rugpull_stay"}, toolNames(s.Before))
	require.NotNil(t, s.Call)
	require.False(t, s.Call.IsError, "%+v", s.Call)

	assert.True(t, s.Notified, "the client is sent notifications/tools/list_changed")
	assert.Equal(t, []string{"plugin_hostile-rugpull_stay"}, toolNames(s.After),
		"the quarantined, the unapproved new and the dropped tool are gone from the client's list")

	changed := f.records(audit.EventToolChanged)
	require.Len(t, changed, 2, "the quarantine is on record, without any call of the tool")
	byTool := map[string]*audit.Record{}
	for _, r := range changed {
		byTool[r.Details["tool"].(string)] = r
		assert.Equal(t, audit.Deny, r.Decision)
		assert.Equal(t, string(reason.ToolChanged), r.Reason)
	}
	poke := byTool["plugin_hostile-rugpull_poke"]
	require.NotNil(t, poke)
	assert.NotEmpty(t, poke.Details["old_hash"])
	assert.NotEqual(t, poke.Details["old_hash"], poke.Details["new_hash"])
	extra := byTool["plugin_hostile-rugpull_extra"]
	require.NotNil(t, extra)
	assert.NotContains(t, extra.Details, "old_hash", "a tool never approved")

	// The user approves from another terminal while the client stays connected.
	approve := exec.Command(fledge, "plugins", "approve", "hostile-rugpull")
	approve.Env = append(os.Environ(), "FLEDGE_CONFIG_DIR="+f.configDir, "FLEDGE_AUDIT_LOG="+f.auditPath)
	out, err := approve.CombinedOutput()
	require.NoError(t, err, string(out))
	s = c.next()
	assert.True(t, s.Notified, "the client is told of the approved tools")
	assert.Equal(t, []string{"plugin_hostile-rugpull_extra", "plugin_hostile-rugpull_poke", "plugin_hostile-rugpull_stay"}, toolNames(s.After))
	for _, tl := range s.After {
		if tl.Name == "plugin_hostile-rugpull_poke" {
			assert.Contains(t, tl.Description, "Before anything else", "the approved definition is the one offered")
		}
	}
	require.Len(t, f.records(audit.EventToolsApproved), 1)
}

// A server that ends in the middle of a session and cannot be started again takes its
// tools with it: the client is told, and its next tools/list lacks them.
func TestServeMCPClientToldOfDeadServer(t *testing.T) {
	sdk := npmInstall(t, pkgSDK)
	fledge := buildFledge(t)
	f := hostile(t, "dies")
	_, s := startWatchingClient(t, f, fledge, sdk, "plugin_hostile-dies_poke")
	assert.Equal(t, []string{"plugin_hostile-dies_poke"}, toolNames(s.Before))
	require.NotNil(t, s.Call)
	require.False(t, s.Call.IsError, "%+v", s.Call)
	assert.True(t, s.Notified, "the client is sent notifications/tools/list_changed")
	assert.Empty(t, toolNames(s.After), "the dead server's tools are gone from the client's list")
	exits := f.records(audit.EventPluginExit)
	require.Len(t, exits, 2, "the server that ended, and the start that failed")
	assert.NotContains(t, exits[0].Details, "handshake_error", "the first ended after serving")
	assert.NotEmpty(t, exits[1].Details["handshake_error"], "the second never completed its handshake")
	assert.Contains(t, f.stderr.String(), "plugin hostile-dies: its tools are not offered", "and fledge says why")
}

// `fledge serve --protocol jsonrpc-2.0` has no message to tell its host that the tools
// changed (the host takes them once, at initialize): after a rug pull behind it, a call of
// the changed tool is refused, and the quarantine is on record.
func TestServeJSONRPCRefusesRugPulledTool(t *testing.T) {
	fledge := buildFledge(t)
	f := hostile(t, "rugpull")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, fledge, "--project", f.project, "serve", "--protocol", "jsonrpc-2.0")
	cmd.Env = append(os.Environ(), "FLEDGE_CONFIG_DIR="+f.configDir, "FLEDGE_AUDIT_LOG="+f.auditPath)
	cmd.Stderr = f.stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ask := func(id int, method string, params any) map[string]any {
		t.Helper()
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		_, err := stdin.Write(append(req, '\n'))
		require.NoError(t, err)
		require.True(t, sc.Scan(), "fledge answered %s", method)
		var resp struct {
			Result map[string]any `json:"result"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &resp), sc.Text())
		return resp.Result
	}
	manifest := ask(1, "initialize", map[string]any{})
	raw, _ := json.Marshal(manifest["tools"])
	assert.Contains(t, string(raw), `"hostile-rugpull_poke"`)
	poke := map[string]any{"name": "hostile-rugpull_poke", "arguments": map[string]any{}}
	first := ask(2, "tool/execute", poke)
	assert.Equal(t, true, first["success"], "%v", first)
	// The server's notifications/tools/list_changed follows its answer, so a call sent at
	// once may overtake it (nothing orders the two): wait until fledge has taken it and
	// asked the server for its tools again, as a host's next call some time later would.
	require.Eventually(t, func() bool {
		return strings.Contains(f.pluginLog("hostile-rugpull"), "hostile: listed anew")
	}, 30*time.Second, 10*time.Millisecond, "fledge never listed the server's tools again after its list_changed")
	second := ask(3, "tool/execute", poke)
	assert.Equal(t, false, second["success"], "%v", second)
	assert.Contains(t, second["result"], "tool definition changed since it was approved")
	changed := f.records(audit.EventToolChanged)
	require.NotEmpty(t, changed)
	refused := 0
	for _, r := range f.records(audit.EventToolCall) {
		if r.Decision == audit.Deny && r.Reason == string(reason.ToolChanged) {
			refused++
		}
	}
	assert.Equal(t, 1, refused, "the refused call is on record")
	assert.Len(t, f.records(audit.EventToolOutcome), 1, "only the first call reached the server")
}
