// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFormsAsEvalSymlinks: forms asks the kernel whether a deep path has no symlink before
// resolving it by hand; whatever the path, it says exactly what resolving it says: a symlink
// at the start, the middle or the end, a dangling one, a loop, a magic link of /proc, a
// file on the way, an absent component.
func TestFormsAsEvalSymlinks(t *testing.T) {
	d := t.TempDir()
	deep := filepath.Join(d, "a", "b", "c", "d", "e")
	require.NoError(t, os.MkdirAll(deep, 0o700))
	require.NoError(t, os.Symlink(filepath.Join(d, "a", "b"), filepath.Join(d, "mid")))
	require.NoError(t, os.Symlink(deep, filepath.Join(d, "a", "b", "c", "last")))
	require.NoError(t, os.Symlink("../../..", filepath.Join(deep, "up")))
	require.NoError(t, os.Symlink(filepath.Join(d, "nowhere"), filepath.Join(d, "a", "dangling")))
	require.NoError(t, os.Symlink(filepath.Join(d, "loop2"), filepath.Join(d, "loop1")))
	require.NoError(t, os.Symlink(filepath.Join(d, "loop1"), filepath.Join(d, "loop2")))
	require.NoError(t, os.WriteFile(filepath.Join(d, "a", "file"), nil, 0o600))
	startLink := filepath.Join(d, "start")
	require.NoError(t, os.Symlink(d, startLink))
	paths := []string{
		deep, deep + "/", deep + "/../e",
		filepath.Join(d, "mid", "c", "d"),
		filepath.Join(d, "a", "b", "c", "last"),
		filepath.Join(d, "a", "b", "c", "last", "up", "c"),
		filepath.Join(d, "a", "dangling", "x"),
		filepath.Join(d, "loop1", "x", "y"),
		filepath.Join(d, "a", "file", "x", "y"),
		filepath.Join(d, "a", "absent", "x"),
		filepath.Join(startLink, "a", "b", "c"),
		"/proc/self/cwd/x/y", "/proc/self/root/etc/hostname", "/usr/share/doc", "/etc", "/",
	}
	for _, p := range paths {
		want := []string{filepath.Clean(p)}
		if r, err := filepath.EvalSymlinks(filepath.Clean(p)); err == nil && r != filepath.Clean(p) {
			want = append(want, r)
		}
		assert.Equal(t, want, forms(p), p)
	}
	assert.True(t, symlinkFree(deep))
	for _, p := range []string{filepath.Join(d, "mid", "c"), filepath.Join(startLink, "a", "b", "c"), "/proc/self/cwd/x", filepath.Join(d, "a", "absent", "x")} {
		assert.False(t, symlinkFree(p), p)
	}
}
