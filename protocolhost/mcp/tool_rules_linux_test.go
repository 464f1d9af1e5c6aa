// SPDX-License-Identifier: MIT

package mcp

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Per-tool rules on the official filesystem server from npm, seen through `fledge serve
// --mcp` by the official TypeScript client: a denied tool is not listed, a call to it is
// refused (tool_denied) with a deny record and nothing written on disk; the managed
// policy's [tools] rules come before the user's, and the user cannot lift them.
func TestToolRulesThroughServeMCP(t *testing.T) {
	sdk := npmInstall(t, pkgSDK) // skips, saying so, when npm cannot reach the registry
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	out, errOut, err := c.run(f.project, "--ni", "plugins", "install", "npm:"+strings.TrimSuffix(pkgFilesystem, "@2026.8.31"), "--version", "2026.8.31", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)

	out, errOut, err = c.run(f.project, "plugins", "tools", "server-filesystem")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `write_file +allowed`, out)

	out, errOut, err = c.run(f.project, "plugins", "tools", "server-filesystem", "--deny", "write_*", "--deny", "edit_file", "--deny", "move_file")
	require.NoError(t, err, errOut)
	assert.Contains(t, out, "server-filesystem: allow (none); deny write_*, edit_file, move_file")
	assert.Regexp(t, `write_file +DENIED by user: deny write_\*`, out)
	assert.Regexp(t, `read_text_file +allowed`, out)

	out, errOut, err = c.run(f.project, "tools", "list")
	require.NoError(t, err, errOut)
	assert.Contains(t, out, "plugin_server-filesystem_read_text_file")
	for _, denied := range []string{"write_file", "edit_file", "move_file"} {
		assert.NotContains(t, out, "plugin_server-filesystem_"+denied, "tools list does not list a denied tool")
	}

	target := filepath.Join(f.project, "written.txt")
	r, stderr := tsServe(t, f, c, sdk, "/", []string{"file://" + f.project}, []string{"serve", "--mcp"}, []map[string]any{
		{"name": "plugin_server-filesystem_write_file", "arguments": map[string]any{"path": target, "content": "pwned"}},
		{"name": "plugin_server-filesystem_read_text_file", "arguments": map[string]any{"path": filepath.Join(f.project, "README.md")}},
	})
	var listed []string
	for _, tl := range r.Tools {
		listed = append(listed, tl.Name)
	}
	assert.Contains(t, listed, "plugin_server-filesystem_read_text_file", stderr)
	for _, denied := range []string{"write_file", "edit_file", "move_file"} {
		assert.NotContains(t, listed, "plugin_server-filesystem_"+denied, "serve --mcp does not offer a denied tool")
	}
	require.Len(t, r.Calls, 2)
	assert.True(t, r.Calls[0].IsError, "%+v", r.Calls[0])
	assert.Contains(t, callText(r.Calls[0]), "reason: tool_denied")
	assert.Contains(t, callText(r.Calls[0]), "deny write_*")
	assert.NoFileExists(t, target, "the denied call never reached the server")
	assert.False(t, r.Calls[1].IsError, "%+v", r.Calls[1])
	assert.Contains(t, callText(r.Calls[1]), "hello from the project")

	// The CLI's own call: refused with tool_denied's exit status, nothing written.
	cmd := exec.Command(fledge, "--project", f.project, "tools", "call", "plugin_server-filesystem_write_file", "path="+target, "content=pwned")
	cmd.Dir, cmd.Env = f.project, c.env()
	var cerr bytes.Buffer
	cmd.Stderr = &cerr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, cerr.String())
	assert.Equal(t, reason.ExitStatus(reason.ToolDenied), ee.ExitCode(), cerr.String())
	assert.Equal(t, 115, ee.ExitCode())
	assert.Contains(t, cerr.String(), "(reason: tool_denied)")
	assert.NoFileExists(t, target)

	var denies int
	for _, rec := range f.records(audit.EventToolCall) {
		if rec.Decision == audit.Deny && rec.Reason == string(reason.ToolDenied) {
			denies++
			assert.Equal(t, "plugin_server-filesystem_write_file", rec.Details["tool"])
			assert.Equal(t, "deny write_*", rec.Details["rule"])
			assert.Equal(t, "user", rec.Details["by"])
		}
		if rec.Decision == audit.Allow {
			assert.NotEqual(t, "write_file", rec.Details["plugin_tool"], "no allowed call of the denied tool: %+v", rec)
		}
	}
	assert.Equal(t, 2, denies, "one deny record per refused call (serve --mcp, tools call)")
	changes := f.records(audit.EventToolRules)
	require.NotEmpty(t, changes, "the rule change is on record")
	assert.Equal(t, audit.Allow, changes[0].Decision)

	// The managed policy's [tools] rules come first: the user's allow cannot lift them, and
	// the user's reset does not remove them.
	out, errOut, err = c.run(f.project, "plugins", "tools", "server-filesystem", "--reset", "--allow", "directory_tree", "--allow", "read_*")
	require.NoError(t, err, errOut)
	assert.Contains(t, out, "server-filesystem: allow directory_tree, read_*; deny (none)")
	etcDir := filepath.Join(f.base, "etc-fledge")
	require.NoError(t, os.MkdirAll(etcDir, 0o755))
	require.NoError(t, os.Chmod(etcDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(etcDir, "managed.toml"), []byte("[tools]\ndeny = [\"server-filesystem:read_media_*\", \"*:directory_tree\"]\n"), 0o644))
	etc := testutil.NewEtcFledge(t, etcDir)
	r, stderr = tsServeVia(t, f, c, sdk, etc, []string{"file://" + f.project}, []map[string]any{
		{"name": "plugin_server-filesystem_directory_tree", "arguments": map[string]any{"path": f.project}},
		{"name": "plugin_server-filesystem_read_text_file", "arguments": map[string]any{"path": filepath.Join(f.project, "README.md")}},
	})
	listed = listed[:0]
	for _, tl := range r.Tools {
		listed = append(listed, tl.Name)
	}
	assert.ElementsMatch(t, []string{"plugin_server-filesystem_read_file", "plugin_server-filesystem_read_text_file", "plugin_server-filesystem_read_multiple_files"}, listed,
		"the user's allow list, less the managed denies: %s", stderr)
	require.Len(t, r.Calls, 2)
	assert.True(t, r.Calls[0].IsError)
	assert.Contains(t, callText(r.Calls[0]), "denied by the managed policy (/etc/fledge/managed.toml: [tools] deny = \"*:directory_tree\")")
	assert.False(t, r.Calls[1].IsError, "%+v", r.Calls[1])
	var managedDenies int
	for _, rec := range f.records(audit.EventToolCall) {
		if rec.Reason == string(reason.ToolDenied) && rec.Details["by"] == "managed" {
			managedDenies++
			assert.Len(t, rec.ManagedPolicy, 64, "the refusal's session carries the managed policy's digest")
		}
	}
	assert.Equal(t, 1, managedDenies)
}

// tsServeVia is tsServe with fledge run under a private /etc/fledge (testutil.EtcFledge).
func tsServeVia(t *testing.T, f *fixture, c *fledgeCLI, sdk string, etc testutil.EtcFledge, roots []string, calls []map[string]any) (*tsResult, string) {
	t.Helper()
	clientDir := filepath.Join(f.base, "client")
	if _, err := os.Stat(clientDir); err != nil {
		copyFile(t, filepath.Join("testdata", "ts_client.mjs"), filepath.Join(clientDir, "ts_client.mjs"), 0o755)
		require.NoError(t, os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(clientDir, "node_modules")))
	}
	a, _ := json.Marshal(append(append(append([]string{}, etc.Prefix[1:]...), c.fledge), "serve", "--mcp"))
	cl, _ := json.Marshal(calls)
	r, _ := json.Marshal(roots)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath(t), filepath.Join(clientDir, "ts_client.mjs"), etc.Prefix[0], string(a), string(cl))
	cmd.Dir = "/"
	cmd.Env = append(append(c.env(), etc.Env...), "FLEDGE_TEST_ROOTS="+string(r))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	var out tsResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	return &out, stderr.String()
}
