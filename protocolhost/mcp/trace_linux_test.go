// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// The official filesystem MCP server, asked for ~/.ssh/id_rsa (its own allowed directory
// is /, so it tries): in trace mode the attempt is a kernel_denied deny record with the
// path its calls named, in the server's session; the key stays unread. Without trace, no
// path record.
func TestTraceFilesystemServerSSHKey(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported() && kernel.NotifySupported(), "seccomp user notification (Linux 5.5+)")
	prefix := npmInstall(t, pkgFilesystem)
	for _, trace := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "trace"}[trace], func(t *testing.T) {
			f := newFixture(t, nil)
			f.env.Trace = trace
			src := f.mcpPlugin("fs", "project", "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/")
			copyTree(t, filepath.Join(prefix, "node_modules"), filepath.Join(src, "node_modules"))
			f.install(src)
			ctx := context.Background()
			// No project: fledge then offers the server no MCP roots, and the server keeps
			// the directories on its command line (all of /), so it does try the key.
			reg, err := plugin.LoadRegistry(f.configDir)
			require.NoError(t, err)
			cat := tools.NewCatalogue(&tools.Host{Env: f.env, Stderr: f.stderr}, reg)
			t.Cleanup(func() { _ = cat.Close() })
			list := cat.List(ctx)
			require.Empty(t, cat.Errors, "stderr: %s", f.stderr.String())
			read := findTool(t, list, "plugin_fs_read_text_file", "plugin_fs_read_file")
			key := filepath.Join(f.home, ".ssh", "id_rsa")
			_, res, err := cat.Call(ctx, read.Name, map[string]any{"path": key})
			require.NoError(t, err)
			assert.False(t, res.Success)
			t.Logf("result: %s %s", res.Message, outputText(t, res))
			assert.NotContains(t, outputText(t, res)+res.Message, "fledge-test-secret")
			require.NoError(t, cat.Close())

			starts := f.records(audit.EventPluginStart)
			require.Len(t, starts, 1)
			var paths []string
			for _, r := range f.records(audit.EventKernelDenied) {
				if r.Details[audit.DetailKind] != "path" {
					continue
				}
				assert.Equal(t, audit.Deny, r.Decision)
				assert.Equal(t, starts[0].Session, r.Session, "in the server's session")
				p, _ := r.Details[audit.DetailPath].(string)
				paths = append(paths, p)
			}
			if !trace {
				assert.Empty(t, paths)
				return
			}
			// The server resolves the path first (realpath(3): one readlink per component),
			// and the private view ends that walk at ~/.ssh, which is not in it: the record
			// names the deepest path the server's calls reached, the key or its directory.
			assert.True(t, slices.Contains(paths, key) || slices.Contains(paths, filepath.Dir(key)),
				"the attempt on the key is on record: %v", paths)
			data, err := os.ReadFile(key)
			require.NoError(t, err)
			assert.Contains(t, string(data), "fledge-test-secret", "the key is untouched")
		})
	}
}
