// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// findTool returns the first listed tool among names (servers rename tools between
// releases, e.g. read_file -> read_text_file).
func findTool(t *testing.T, list []tools.Tool, names ...string) tools.Tool {
	t.Helper()
	for _, n := range names {
		for _, tl := range list {
			if tl.Name == n {
				return tl
			}
		}
	}
	var have []string
	for _, tl := range list {
		have = append(have, tl.Name)
	}
	t.Fatalf("none of %v listed; have %v", names, have)
	return tools.Tool{}
}

func outputText(t *testing.T, r *tools.Result) string {
	t.Helper()
	var s string
	if json.Unmarshal(r.Output, &s) == nil {
		return s
	}
	return string(r.Output)
}

// The official filesystem server is told it may use the project and all of / (its own
// check passes for everything), and the sandbox is what stands between it and the user's
// secrets: the project reads, ~/.ssh/id_rsa and /etc/shadow do not, and nothing is written
// outside the project.
func TestFilesystemServerConfined(t *testing.T) {
	prefix := npmInstall(t, pkgFilesystem)
	f := newFixture(t, nil)
	src := f.mcpPlugin("fs", "project", "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "$FLEDGE_PROJECT_ROOT", "/")
	copyTree(t, filepath.Join(prefix, "node_modules"), filepath.Join(src, "node_modules"))
	f.install(src)
	outside := filepath.Join(f.base, "outside")
	require.NoError(t, os.MkdirAll(outside, 0o755))

	ctx := context.Background()
	cat := f.catalogue()
	list := cat.List(ctx)
	require.Empty(t, cat.Errors, "stderr: %s", f.stderr.String())
	read := findTool(t, list, "plugin_fs_read_text_file", "plugin_fs_read_file")
	write := findTool(t, list, "plugin_fs_write_file")
	assert.Equal(t, "mcp", read.Protocol)
	assert.Contains(t, string(read.InputSchema), `"path"`, "the server's own input schema is listed")

	_, res, err := cat.Call(ctx, read.Name, map[string]any{"path": filepath.Join(f.project, "README.md")})
	require.NoError(t, err)
	require.True(t, res.Success, "reading the project: %s %s", res.Message, res.Output)
	assert.Contains(t, outputText(t, res), "hello from the project")

	for _, secret := range []string{filepath.Join(f.home, ".ssh", "id_rsa"), "/etc/shadow"} {
		_, res, err := cat.Call(ctx, read.Name, map[string]any{"path": secret})
		require.NoError(t, err, secret)
		assert.False(t, res.Success, "%s must not be readable: %s", secret, res.Output)
		got := outputText(t, res) + res.Message
		assert.NotContains(t, got, "fledge-test-secret")
		assert.NotContains(t, got, "root:")
		assert.Regexp(t, `(?i)EACCES|permission denied|not permitted|denied`, got, secret)
	}

	escape := filepath.Join(outside, "escaped.txt")
	_, res, err = cat.Call(ctx, write.Name, map[string]any{"path": escape, "content": "written by the server"})
	require.NoError(t, err)
	assert.False(t, res.Success, "writing outside the project must fail: %s", res.Output)
	assert.NoFileExists(t, escape, "nothing may reach the disk outside the project")

	// Arguments are checked against the server's schema before anything is sent.
	calls := len(f.records(audit.EventToolCall))
	_, _, err = cat.Call(ctx, read.Name, map[string]any{"path": 42})
	require.ErrorIs(t, err, tools.ErrBadArguments)
	_, _, err = cat.Call(ctx, read.Name, map[string]any{})
	require.ErrorIs(t, err, tools.ErrBadArguments)
	refused := f.records(audit.EventToolCall)[calls:]
	require.Len(t, refused, 2, "a refused call never reaches the server, and is on record as refused")
	for _, r := range refused {
		assert.Equal(t, audit.Deny, r.Decision)
		assert.Equal(t, string(reason.BadArguments), r.Reason)
		assert.Contains(t, r.Details["error"], "path")
	}

	// Every call: a decision before (tool and argument keys, never values by default) and an
	// outcome after.
	recs := f.records(audit.EventToolCall)[:calls]
	require.Len(t, recs, 4)
	for _, r := range recs {
		assert.Equal(t, audit.Allow, r.Decision)
		assert.Equal(t, read.Name == r.Details["tool"] || write.Name == r.Details["tool"], true)
		assert.NotContains(t, r.Details, "arguments")
		raw, _ := json.Marshal(r.Details)
		assert.NotContains(t, string(raw), "written by the server")
		assert.NotContains(t, string(raw), "README.md")
	}
	assert.Equal(t, []any{"content", "path"}, recs[3].Details["argument_keys"])
	outs := f.records(audit.EventToolOutcome)
	require.Len(t, outs, 4)
	assert.Equal(t, false, outs[0].Details["is_error"])
	assert.Equal(t, audit.Allow, outs[0].Decision)
	// The server's read of ~/.ssh/id_rsa failed in the sandbox: an error with the server's
	// own words, bounded, never "allow ok" (OCSF: Failure).
	for _, o := range outs[1:] {
		assert.Equal(t, true, o.Details["is_error"])
		assert.Equal(t, audit.Error, o.Decision)
		assert.Equal(t, string(reason.ToolError), o.Reason)
		msg, _ := o.Details["error"].(string)
		assert.Regexp(t, `(?i)EACCES|permission denied|not permitted|denied|ENOENT|no such file`, msg)
		assert.LessOrEqual(t, len(msg), 1024+3)
		assert.NotContains(t, msg, "fledge-test-secret")
	}

	require.NoError(t, cat.Close())
	starts, exits := f.records(audit.EventPluginStart), f.records(audit.EventPluginExit)
	require.Len(t, starts, 1, "one server process for the whole catalogue")
	require.Len(t, exits, 1)
	assert.Equal(t, "mcp", starts[0].Details["protocol"])
	// plugin_exit counts what went wrong in the session: three failed tool calls at least.
	n, err := exits[0].Details["errors"].(json.Number).Int64()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, int64(3))
}

// server-everything: its tools are listed with their schemas and echo answers right; with
// [audit] tool_argument_values the values are on record too.
func TestEverythingServerEcho(t *testing.T) {
	prefix := npmInstall(t, pkgEverything)
	f := newFixture(t, func(c *policy.Config) { c.Audit.ToolArgumentValues = true })
	src := f.mcpPlugin("everything", "", "node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio")
	copyTree(t, filepath.Join(prefix, "node_modules"), filepath.Join(src, "node_modules"))
	f.install(src)

	ctx := context.Background()
	cat := f.catalogue()
	list := cat.List(ctx)
	require.Empty(t, cat.Errors, "stderr: %s", f.stderr.String())
	echo := findTool(t, list, "plugin_everything_echo")
	findTool(t, list, "plugin_everything_get-sum", "plugin_everything_add")
	assert.Contains(t, string(echo.InputSchema), `"message"`)
	for _, tl := range list {
		assert.True(t, strings.HasPrefix(tl.Name, "plugin_everything_"), tl.Name)
	}

	_, res, err := cat.Call(ctx, echo.Name, map[string]any{"message": "hello through fledge"})
	require.NoError(t, err)
	require.True(t, res.Success, res.Message)
	assert.Equal(t, "Echo: hello through fledge", outputText(t, res))
	assert.Equal(t, reason.OK, res.Reason)

	recs := f.records(audit.EventToolCall)
	require.Len(t, recs, 1)
	assert.Equal(t, map[string]any{"message": "hello through fledge"}, recs[0].Details["arguments"], "values on record when policy says so")
}
