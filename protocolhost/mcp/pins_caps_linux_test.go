// SPDX-License-Identifier: MIT

package mcp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin/pins"
)

// The official everything server lists get-roots-list only to a client that can list roots.
// Installed from npm outside any project (from /, as a user installs from anywhere), its
// tools are pinned under the capabilities `serve --mcp` offers it later: the first real
// use, from an editor offering its project as a root, holds nothing back as changed, no
// tools_quarantined record is written, and the tool answers.
func TestNPMInstallPinsUnderServeCapabilities(t *testing.T) {
	sdk := npmInstall(t, pkgSDK) // skips, saying so, when npm cannot reach the registry
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}

	out, errOut, err := c.run("/", "--ni", "plugins", "install", "npm:"+strings.TrimSuffix(pkgEverything, "@2026.8.31"),
		"--version", "2026.8.31", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	assert.Contains(t, out, "plugin_server-everything_get-roots-list", "listed at install as serve will list it")
	pf, err := pins.Load(f.configDir, "server-everything")
	require.NoError(t, err)
	require.NotNil(t, pf, "pinned at install")
	_, pinned := pf.Tools["get-roots-list"]
	assert.True(t, pinned, "get-roots-list is pinned at install")

	r, stderr := tsServe(t, f, c, sdk, "/", []string{"file://" + f.project}, []string{"serve", "--mcp"}, []map[string]any{
		{"name": "plugin_server-everything_get-roots-list", "arguments": map[string]any{}},
	})
	require.Len(t, r.Calls, 1)
	assert.False(t, r.Calls[0].IsError, "%+v", r.Calls[0])
	assert.Empty(t, r.Calls[0].Thrown)
	assert.Contains(t, callText(r.Calls[0]), f.project, "the server lists the client's root")
	assert.NotContains(t, stderr, "held back")
	assert.Empty(t, f.records(audit.EventToolChanged), "nothing held back at its first real use")
	pf, err = pins.Load(f.configDir, "server-everything")
	require.NoError(t, err)
	assert.Zero(t, len(pf.Pending), "no change pending review")
	_, err = os.Stat(filepath.Join(f.configDir, "pins", "server-everything.json"))
	require.NoError(t, err)
}
