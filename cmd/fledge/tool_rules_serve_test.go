// SPDX-License-Identifier: MIT

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// `fledge serve --protocol jsonrpc-2.0` follows the tool rules as serve --mcp does: a denied
// tool is not in the manifest it announces, and a call to it is refused (tool_denied), on
// record, without reaching the plugin.
func TestServeJSONRPCFollowsToolRules(t *testing.T) {
	home := setupServeWorld(t)
	hostile, err := os.ReadFile(filepath.Join("testdata", "jsonrpc", "hostile"))
	require.NoError(t, err)
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "toolbox"), hostile, 0o755))
	installExe(t, filepath.Join(bin, "toolbox"), "")
	out, errOut, code := fledgeMain(t, "plugins", "tools", "toolbox", "--deny", "read")
	require.Equal(t, 0, code, "%s%s", out, errOut)

	h := startServe(t, t.TempDir(), "--protocol", "jsonrpc-2.0")
	man := result(t, h.call(1, "initialize", map[string]any{"protocol_version": 1}))
	var names []string
	for _, x := range man["tools"].([]any) {
		names = append(names, x.(map[string]any)["name"].(string))
	}
	assert.Contains(t, names, "toolbox_add")
	assert.NotContains(t, names, "toolbox_read", "a denied tool is not announced")
	read := result(t, h.call(2, "tool/execute", map[string]any{"name": "toolbox_read", "arguments": map[string]any{"path": filepath.Join(home, "x")}}))
	assert.Equal(t, false, read["success"])
	assert.Contains(t, read["result"], "reason: tool_denied")

	var denied int
	require.NoError(t, audit.Read(filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		if r.Event == audit.EventToolCall && r.Reason == "tool_denied" {
			denied++
			assert.Equal(t, "plugin_toolbox_read", r.Details["tool"])
		}
		if r.Event == audit.EventToolCall && r.Decision == audit.Allow {
			assert.NotEqual(t, "read", r.Details["plugin_tool"], "the denied tool never reached the plugin")
		}
		return nil
	}))
	assert.Equal(t, 1, denied)
}
