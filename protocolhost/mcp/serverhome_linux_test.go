// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// A server that keeps its state under ~ and the XDG base directories, as programs do,
// works with no flags of its own: its home is its data dir. The user's real home stays
// untouched.
func TestServerHomeIsItsDataDir(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, nil)
	src := f.mcpPlugin("homewriter", "project", "homewriter.mjs")
	copyFile(t, filepath.Join("testdata", "homewriter.mjs"), filepath.Join(src, "homewriter.mjs"), 0o755)
	f.install(src)
	ctx := context.Background()
	cat := f.catalogue()
	list := cat.List(ctx)
	require.Empty(t, cat.Errors, "stderr: %s", f.stderr.String())
	tool := findTool(t, list, "plugin_homewriter_remember")
	_, res, err := cat.Call(ctx, tool.Name, nil)
	require.NoError(t, err)
	require.True(t, res.Success, "%s %s", res.Message, outputText(t, res))
	data := filepath.Join(f.configDir, "plugins", "homewriter", "data")
	for _, p := range []string{".homewriter/state.json", ".config/homewriter/config.json", ".local/share/homewriter/data.json",
		".local/state/homewriter/log.json", ".cache/homewriter/cache.json"} {
		assert.FileExists(t, filepath.Join(data, p))
	}
	_, err = os.Stat(filepath.Join(f.home, ".homewriter"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the user's home is not written")
}
