// SPDX-License-Identifier: MIT

package wasm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/wasm"
)

// TestCacheDirStaysBounded: a compilation cache dir filled past its bound with entries of
// earlier days (machine code of modules long gone, merged bytes, kept copies, an older
// wazero's subdirectory, a write that never finished) is brought back under it by the next
// compile that writes there: the least recently used entries go first, and an entry used a
// minute ago (another process's), a write under way and this start's own entries stay.
// Before, every entry stayed forever.
func TestCacheDirStaysBounded(t *testing.T) {
	requireCompiler(t)
	t.Cleanup(wasm.ForgetCompiled)
	const bound = 4 << 20
	t.Cleanup(wasm.SetCacheMaxBytes(bound))
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	first, _ := onlyEntry(t, cache, writeModule(t, dir, "first.wasm", exitModule(7)))
	wazeroDir := filepath.Dir(first)

	now := time.Now()
	fill := func(sub, name string, size int, age time.Duration) string {
		p := filepath.Join(cache, sub, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, make([]byte, size), 0o600))
		at := now.Add(-age)
		require.NoError(t, os.Chtimes(p, at, at))
		return p
	}
	var olds []oldEntry
	subs := []string{filepath.Base(wazeroDir), "fledge-merged", "fledge-modules", "wazero-v1.0.0-old-build"}
	for i := range 40 { // 10 MiB of entries from 2 h to 41 days ago
		age := 2*time.Hour + time.Duration(i)*24*time.Hour
		name := fmt.Sprintf("%064x", i)
		olds = append(olds, oldEntry{fill(subs[i%len(subs)], name, 256<<10, age), age})
	}
	inUse := fill(filepath.Base(wazeroDir), fmt.Sprintf("%064x", 1000), 256<<10, time.Minute)
	writing := fill("fledge-merged", "abc.tmp", 64<<10, time.Minute)
	stale := fill("fledge-merged", "def.tmp", 64<<10, 3*time.Hour)

	// The next start of another module, as by a new fledge process: it compiles and writes.
	wasm.ForgetCompiled()
	w, err := wasm.New(wasm.Options{CacheDir: cache})
	require.NoError(t, err)
	require.NoError(t, w.Precompile(context.Background(), writeModule(t, dir, "second.wasm", exitModule(9))))
	require.NoError(t, w.Close())

	var total int64
	require.NoError(t, filepath.Walk(cache, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && filepath.Dir(p) != cache {
			total += fi.Size()
		}
		return err
	}))
	t.Logf("cache dir: %d bytes after the pass (bound %d, 10 MiB before)", total, bound)
	require.LessOrEqual(t, total, int64(bound), "the cache dir is back under its bound")

	require.FileExists(t, first, "this start's own entry")
	require.FileExists(t, inUse, "an entry used a minute ago")
	require.FileExists(t, writing, "a write under way")
	require.NoFileExists(t, stale, "a write that never finished, 3 h ago")
	require.Len(t, cacheEntries(t, cache), 2+1+keptUnder(olds, filepath.Base(wazeroDir), "wazero-v1.0.0-old-build"),
		"both modules' code, the entry in use and the old entries kept")
	// Least recently used first: whatever stayed is newer than whatever went.
	var newestGone, oldestKept time.Duration = 1 << 62, 0
	for _, o := range olds {
		if _, err := os.Stat(o.path); err == nil {
			oldestKept = max(oldestKept, o.age)
		} else {
			newestGone = min(newestGone, o.age)
		}
	}
	require.Less(t, oldestKept, newestGone, "an entry stayed while a more recently used one went")
	require.Less(t, newestGone, time.Duration(1<<62), "old entries went")
}

type oldEntry struct {
	path string
	age  time.Duration
}

// keptUnder counts the olds still on disk under the given subdirectories.
func keptUnder(olds []oldEntry, subs ...string) int {
	n := 0
	for _, o := range olds {
		for _, s := range subs {
			if strings.Contains(o.path, "/"+s+"/") {
				if _, err := os.Stat(o.path); err == nil {
					n++
				}
			}
		}
	}
	return n
}
