// SPDX-License-Identifier: MIT

package filestamp

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func raw(t *testing.T, path string) Stamp {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	s, ok := stampOf(fi)
	require.True(t, ok)
	return s
}

// TestStampSeesEveryChange: a file changed just now is not vouched for; once settled, its
// stamp matches only the same file left alone: an in-place rewrite of the same size with
// its mtime put back, and a replacement by rename, both show.
func TestStampSeesEveryChange(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stamps vouch for nothing off Linux")
	}
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("aaaa"), 0o600))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(path, old, old)) // mtime old; the change time is now
	fi, err := os.Stat(path)
	require.NoError(t, err)
	_, ok := Of(fi, time.Now())
	require.False(t, ok, "a file changed just now is not vouched for")

	time.Sleep(Settle + 100*time.Millisecond)
	fi, err = os.Stat(path)
	require.NoError(t, err)
	s1, ok := Of(fi, time.Now())
	require.True(t, ok, "left alone past Settle: vouched for")
	require.Equal(t, s1, raw(t, path), "and the same stamp while left alone")

	require.NoError(t, os.WriteFile(path, []byte("bbbb"), 0o600))
	require.NoError(t, os.Chtimes(path, old, old))
	require.NotEqual(t, s1, raw(t, path), "an in-place rewrite shows in the change time")

	s2 := raw(t, path)
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, []byte("cccc"), 0o600))
	require.NoError(t, os.Chtimes(tmp, old, old))
	require.NoError(t, os.Rename(tmp, path))
	require.NotEqual(t, s2, raw(t, path), "a replacement is another inode")
}
