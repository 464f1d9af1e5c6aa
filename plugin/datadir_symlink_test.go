// SPDX-License-Identifier: MIT

package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A plugin's data dir holds whatever the plugin wrote, symlinks to anywhere included.
// Re-installing (the data dir moves into the new copy) and removing (it is deleted) must
// act on the links, never on what they point at.
func TestDataDirSymlinksNotFollowed(t *testing.T) {
	cfg := t.TempDir()
	_, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err)
	outside := t.TempDir() // stands for /etc
	keep := filepath.Join(outside, "keep")
	require.NoError(t, os.WriteFile(keep, []byte("keep"), 0o644))
	data := DataDir(cfg, "hello")
	require.NoError(t, os.MkdirAll(filepath.Join(data, "sub"), 0o700))
	require.NoError(t, os.Symlink(outside, filepath.Join(data, "dirlink")))
	require.NoError(t, os.Symlink(keep, filepath.Join(data, "filelink")))
	require.NoError(t, os.Symlink(outside, filepath.Join(data, "sub", "deeper")))

	intact := func() {
		t.Helper()
		got, err := os.ReadFile(keep)
		require.NoError(t, err)
		assert.Equal(t, "keep", string(got))
		ents, err := os.ReadDir(outside)
		require.NoError(t, err)
		assert.Len(t, ents, 1, "nothing added or removed outside")
	}

	_, _, err = install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err, "re-install keeps the data dir")
	link, err := os.Readlink(filepath.Join(DataDir(cfg, "hello"), "dirlink"))
	require.NoError(t, err)
	assert.Equal(t, outside, link, "moved as a link")
	intact()

	_, err = Remove(cfg, "hello")
	require.NoError(t, err)
	intact()
	assertClean(t, cfg)
}
