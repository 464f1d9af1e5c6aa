// SPDX-License-Identifier: MIT

package kernel

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// readsUnder builds l through the cache, enforces it on a throwaway thread and reports
// whether that thread can read path.
func readsUnder(t *testing.T, l *Landlock, path string) bool {
	t.Helper()
	fd, err := LandlockRuleset(l)
	require.NoError(t, err)
	defer unix.Close(fd)
	ok := false
	onThrowawayThread(t, func() {
		require.NoError(t, unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		require.NoError(t, RestrictLandlock(l, fd))
		_, err := os.ReadFile(path)
		ok = err == nil
	})
	return ok
}

// TestRulesetCacheSeesReplacedPaths: a cached ruleset is not used once a path it was built
// from names another inode: an entry of a settled directory (checked through the
// directory's stamp) replaced by a new file or by a symlink to a file outside, and a path
// whose directory changes all the time (checked one by one), each get a new ruleset that
// allows exactly what the paths name now.
func TestRulesetCacheSeesReplacedPaths(t *testing.T) {
	abi := LandlockABI()
	testutil.SkipUnlessSupported(t, abi > 0, "no Landlock")
	root := t.TempDir()
	dir := filepath.Join(root, "etc")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	outside := filepath.Join(root, "outside")
	require.NoError(t, os.WriteFile(outside, []byte("OUTSIDE"), 0o644))
	for _, n := range []string{"a", "b"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644))
	}
	time.Sleep(dirSettle + 100*time.Millisecond) // settled: checked through its stamp
	l := &Landlock{ABI: abi, ReadOnly: []string{filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")}}

	assert.True(t, readsUnder(t, l, filepath.Join(dir, "a")))
	rulesets.mu.Lock()
	key := ""
	for k, e := range rulesets.fds {
		if e.ids != nil && len(e.ids.byDir) == 1 {
			key = k
		}
	}
	rulesets.mu.Unlock()
	require.NotEmpty(t, key, "the settled directory's entries are checked through its stamp")
	assert.False(t, readsUnder(t, l, outside), "nothing outside the rules")

	// a replaced by a new file: the new one is readable (a stale rule would refuse it).
	require.NoError(t, os.Remove(filepath.Join(dir, "a")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), []byte("new"), 0o644))
	assert.True(t, readsUnder(t, l, filepath.Join(dir, "a")), "the replaced file is the one allowed")

	// c appears: allowed from now on.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c"), []byte("c"), 0o644))
	assert.True(t, readsUnder(t, l, filepath.Join(dir, "c")))

	// b replaced by a symlink to outside: the rule follows the link as a fresh build does
	// (it allows what the path names now), and the old b's inode is no longer what is
	// allowed under that name.
	require.NoError(t, os.Remove(filepath.Join(dir, "b")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "b")))
	assert.True(t, readsUnder(t, l, filepath.Join(dir, "b")))
	// The symlink is checked one by one from now on: retargeting it (no change to the
	// directory) is seen too.
	other := filepath.Join(root, "other")
	require.NoError(t, os.WriteFile(other, []byte("OTHER"), 0o644))
	tmpLink := filepath.Join(dir, "b.new")
	require.NoError(t, os.Symlink(other, tmpLink))
	require.NoError(t, os.Rename(tmpLink, filepath.Join(dir, "b")))
	assert.True(t, readsUnder(t, l, other), "the retargeted link's new target is allowed")
	assert.False(t, readsUnder(t, l, outside), "the old target is not")
}
