// SPDX-License-Identifier: MIT

package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// buildFledge builds cmd/fledge once for the tests that run it as a program.
func buildFledge(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "fledge")
	cmd := exec.Command(gobin, "build", "-o", out, "./cmd/fledge")
	cmd.Dir = "../.."
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	return out
}

type tsResult struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Tools []struct {
		Name        string         `json:"name"`
		InputSchema map[string]any `json:"inputSchema"`
	} `json:"tools"`
	Calls []struct {
		Thrown  string `json:"thrown"`
		IsError bool   `json:"isError"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"calls"`
}

func (r *tsResult) names() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Name)
	}
	return out
}

// tsClient returns a runner of testdata/ts_client.mjs (the official TypeScript client)
// against the fledge binary with fledgeArgs, in f's world; it returns the client's report
// and the stderr of the whole chain (client, fledge, plugins).
func tsClient(t *testing.T, f *fixture, fledge, sdk string) func(fledgeArgs []string, calls []map[string]any) (*tsResult, string) {
	clientDir := filepath.Join(f.base, "client")
	copyFile(t, filepath.Join("testdata", "ts_client.mjs"), filepath.Join(clientDir, "ts_client.mjs"), 0o755)
	require.NoError(t, os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(clientDir, "node_modules")))
	return func(fledgeArgs []string, calls []map[string]any) (*tsResult, string) {
		t.Helper()
		a, _ := json.Marshal(fledgeArgs)
		c, _ := json.Marshal(calls)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, nodePath(t), filepath.Join(clientDir, "ts_client.mjs"), fledge, string(a), string(c))
		cmd.Dir = f.project
		cmd.Env = append(os.Environ(), "FLEDGE_CONFIG_DIR="+f.configDir, "FLEDGE_AUDIT_LOG="+f.auditPath)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
		var r tsResult
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), stdout.String())
		return &r, stderr.String()
	}
}

// The official TypeScript MCP client, configured with the one command `fledge serve
// --mcp`, gets every tool fledge hosts: a fledge-v1 command with typed args, an MCP
// server's tool, a jsonrpc-2.0 and a runtime-v1 plugin's tool, each run confined and audited.
func TestServeMCPWithOfficialTypeScriptClient(t *testing.T) {
	fledge := buildFledge(t)
	sdk := npmInstall(t, pkgSDK)
	everything := npmInstall(t, pkgEverything)
	f := newFixture(t, nil)
	greet, err := filepath.Abs(filepath.Join("testdata", "greet"))
	require.NoError(t, err)
	f.install(greet)
	src := f.mcpPlugin("everything", "", "node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio")
	copyTree(t, filepath.Join(everything, "node_modules"), filepath.Join(src, "node_modules"))
	f.install(src)
	// A JSON-RPC 2.0 tool/hook plugin (jsonrpc-2.0), installed as users do (its handshake is recorded).
	toolbox := filepath.Join(f.base, "toolbox")
	copyFile(t, filepath.Join("..", "..", "cmd", "fledge", "testdata", "jsonrpc", "hostile"), toolbox, 0o755)
	install := exec.Command(fledge, "--ni", "plugins", "install", toolbox, "--protocol", "jsonrpc-2.0", "--grant", "")
	install.Env = append(os.Environ(), "FLEDGE_CONFIG_DIR="+f.configDir, "FLEDGE_AUDIT_LOG="+f.auditPath)
	out, err := install.CombinedOutput()
	require.NoError(t, err, string(out))

	rt, err := filepath.Abs(filepath.Join("testdata", "rt"))
	require.NoError(t, err)
	f.install(rt) // a runtime-v1 (runtime contract) plugin

	run := tsClient(t, f, fledge, sdk)
	r, _ := run([]string{"--project", f.project, "serve", "--mcp"}, []map[string]any{
		{"name": "plugin_greet_greet", "arguments": map[string]any{"name": "Ada", "shout": true, "times": 2}},
		{"name": "plugin_greet_ask", "arguments": map[string]any{"topic": "colours"}},
		{"name": "plugin_everything_echo", "arguments": map[string]any{"message": "through two hops"}},
		{"name": "plugin_greet_greet", "arguments": map[string]any{"times": 2}},
		{"name": "plugin_toolbox_add", "arguments": map[string]any{"a": 2, "b": 3.5}},
		{"name": "plugin_rt_echo", "arguments": map[string]any{"text": "through runtime-v1"}},
	})
	assert.Equal(t, "fledge", r.Server.Name)
	names := r.names()
	assert.Contains(t, names, "plugin_greet_greet")
	assert.Contains(t, names, "plugin_greet_ask")
	assert.Contains(t, names, "plugin_everything_echo")
	for _, tl := range r.Tools {
		if tl.Name == "plugin_greet_greet" {
			assert.Equal(t, []any{"name"}, tl.InputSchema["required"])
		}
	}
	require.Len(t, r.Calls, 6)
	greetRes := r.Calls[0]
	require.False(t, greetRes.IsError, "%+v", greetRes)
	require.Len(t, greetRes.Content, 1)
	assert.Equal(t, "HELLO, ADA!\nHELLO, ADA!\n", greetRes.Content[0].Text)
	assert.True(t, r.Calls[1].IsError, "a prompt without a default fails the call")
	require.NotEmpty(t, r.Calls[1].Content)
	assert.Contains(t, r.Calls[1].Content[0].Text, "Favourite colour?")
	require.False(t, r.Calls[2].IsError, "%+v", r.Calls[2])
	assert.Equal(t, "Echo: through two hops", r.Calls[2].Content[0].Text)
	assert.True(t, r.Calls[3].IsError, "a missing required argument is a tool error")
	assert.Contains(t, r.Calls[3].Content[0].Text, `missing required parameter "name"`)

	assert.Contains(t, names, "plugin_toolbox_add", "a jsonrpc-2.0 plugin's tools too")
	require.False(t, r.Calls[4].IsError, "%+v", r.Calls[4])
	assert.Equal(t, "5.5", r.Calls[4].Content[0].Text)

	assert.Contains(t, names, "plugin_rt_echo", "a runtime-v1 plugin's tools too")
	require.False(t, r.Calls[5].IsError, "%+v", r.Calls[5])
	assert.JSONEq(t, `{"text":"through runtime-v1"}`, r.Calls[5].Content[0].Text)

	outs := f.records(audit.EventToolOutcome)
	require.Len(t, outs, 5, "five calls reached a plugin, each with its outcome on record")

	// The same tools through `fledge tools call`, name=value typed from the MCP schema.
	call := exec.Command(fledge, "--project", f.project, "tools", "call", "plugin_everything_echo", "message=from the CLI")
	call.Env = install.Env
	out, err = call.Output()
	require.NoError(t, err)
	assert.Equal(t, "Echo: from the CLI\n", string(out))

	// --tools limits what is exposed.
	r, _ = run([]string{"--project", f.project, "serve", "--mcp", "--tools", "plugin_everything_echo"}, nil)
	assert.Equal(t, []string{"plugin_everything_echo"}, r.names())
}

// Cancellation end to end: the client gives up on a call, fledge cancels it at the MCP
// server behind it (notifications/cancelled on both hops), and the outcome says cancelled.
func TestServeMCPCancellation(t *testing.T) {
	fledge := buildFledge(t)
	sdk := npmInstall(t, pkgSDK)
	f := newFixture(t, nil) // timeout_default 30s: the cancel comes from the client
	src := f.mcpPlugin("slow", "", "hostile.mjs", "slow")
	copyFile(t, filepath.Join("testdata", "hostile.mjs"), filepath.Join(src, "hostile.mjs"), 0o755)
	f.install(src)
	run := tsClient(t, f, fledge, sdk)
	r, stderr := run([]string{"--project", f.project, "serve", "--mcp"}, []map[string]any{
		{"name": "plugin_slow_poke", "arguments": map[string]any{}, "abortAfterMs": 500},
	})
	require.Len(t, r.Calls, 1)
	assert.Contains(t, r.Calls[0].Thrown, "aborted", "the client saw its own abort")
	assert.Contains(t, f.pluginLog("slow"), "hostile: cancelled request", "the server behind fledge was told (its stderr log)")
	assert.NotContains(t, stderr, "hostile: cancelled request", "the server's stderr is not the client's")
	outs := f.records(audit.EventToolOutcome)
	require.Len(t, outs, 1)
	assert.Equal(t, "cancelled", outs[0].Reason)
}
