// SPDX-License-Identifier: MIT

package plugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateFile)
	s, err := OpenStore(path, StoreLimits{})
	require.NoError(t, err)
	assert.Empty(t, s.Warnings())
	_, ok := s.Get("k")
	assert.False(t, ok)
	require.NoError(t, s.Set("last_target", "production"))
	require.NoError(t, s.Set("ünïcode key", "välue\nwith newline"))
	require.NoError(t, s.Set("last_target", "staging"))

	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	s2, err := OpenStore(path, StoreLimits{})
	require.NoError(t, err)
	v, ok := s2.Get("last_target")
	assert.True(t, ok)
	assert.Equal(t, "staging", v)
	assert.Equal(t, []string{"last_target", "ünïcode key"}, s2.Keys())
	assertNoTempFiles(t, dir)
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotContains(t, e.Name(), ".tmp-", "temp file left behind")
	}
}

func TestStoreLimits(t *testing.T) {
	lim := StoreLimits{MaxKeyBytes: 8, MaxValueBytes: 16, MaxKeys: 3, MaxFileBytes: 60}
	cases := []struct {
		name, key, value string
		what             string // "" = accepted
	}{
		{"ok", "a", "1", ""},
		{"key too long", "123456789", "x", "key"},
		{"empty key", "", "x", "key"},
		{"control char", "a\nb", "x", "key"},
		{"escape", "a\x1b", "x", "key"},
		{"c1 control", "a\u0085", "x", "key"},
		{"invalid utf8", "a\xff", "x", "key"},
		{"value too long", "b", strings.Repeat("v", 17), "value"},
		{"value at limit", "b", strings.Repeat("v", 16), ""},
		{"overwrite does not count", "a", "2", ""},
		{"third key", "c", "3", ""},
		{"fourth key", "d", "4", "keys"},
		{"file too large", "c", strings.Repeat("\u2603", 5), "file"}, // 54 bytes so far, +14
	}
	dir := t.TempDir()
	path := filepath.Join(dir, StateFile)
	s, err := OpenStore(path, lim)
	require.NoError(t, err)
	for _, tc := range cases {
		before, _ := os.ReadFile(path)
		beforeKeys := s.Keys()
		err := s.Set(tc.key, tc.value)
		if tc.what == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		var le *LimitError
		require.ErrorAs(t, err, &le, tc.name)
		assert.ErrorIs(t, err, ErrLimit)
		assert.Equal(t, tc.what, le.What, tc.name)
		after, _ := os.ReadFile(path)
		assert.Equal(t, before, after, "%s: file changed", tc.name)
		assert.Equal(t, beforeKeys, s.Keys(), "%s: memory changed", tc.name)
	}
	v, _ := s.Get("c")
	assert.Equal(t, "3", v)
	assertNoTempFiles(t, dir)
}

func TestStoreDefaultLimits(t *testing.T) {
	s, err := OpenStore(filepath.Join(t.TempDir(), StateFile), StoreLimits{})
	require.NoError(t, err)
	require.NoError(t, s.Set(strings.Repeat("k", 256), strings.Repeat("v", 64<<10)))
	require.ErrorIs(t, s.Set(strings.Repeat("k", 257), "x"), ErrLimit)
	require.ErrorIs(t, s.Set("x", strings.Repeat("v", 64<<10+1)), ErrLimit)
	// 16 values of 64 KiB are over the 1 MiB file bound before the 256-key bound.
	var err2 error
	for i := 0; i < 20 && err2 == nil; i++ {
		err2 = s.Set(strings.Repeat("n", i+1), strings.Repeat("v", 64<<10))
	}
	var le *LimitError
	require.ErrorAs(t, err2, &le)
	assert.Equal(t, "file", le.What)
	assert.Contains(t, le.Error(), "at most 1048576")
}

func TestStoreCorruptMovedAside(t *testing.T) {
	for name, content := range map[string]string{
		"not json":       "{oops",
		"wrong shape":    `{"a": 1}`,
		"array":          `["a"]`,
		"null":           `null`,
		"over file size": `{"a":"` + strings.Repeat("x", 200) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, StateFile)
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			s, err := OpenStore(path, StoreLimits{MaxFileBytes: 100})
			require.NoError(t, err)
			require.Len(t, s.Warnings(), 1)
			assert.Contains(t, s.Warnings()[0], "moved it to")
			assert.Equal(t, 0, s.Len())
			matches, _ := filepath.Glob(path + ".corrupt-*")
			require.Len(t, matches, 1, "corrupt file kept aside")
			kept, _ := os.ReadFile(matches[0])
			assert.Equal(t, content, string(kept))
			_, err = os.Stat(path)
			assert.True(t, os.IsNotExist(err))
			require.NoError(t, s.Set("fresh", "start"))
		})
	}
}

func TestStoreSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim.txt")
	require.NoError(t, os.WriteFile(victim, []byte(`{"secret":"do not touch"}`), 0o600))
	path := filepath.Join(dir, StateFile)
	require.NoError(t, os.Symlink(victim, path))

	// Reading refuses the link.
	_, err := OpenStore(path, StoreLimits{})
	require.ErrorIs(t, err, ErrUnsafeFile)

	// A link planted after open is replaced, never written through.
	require.NoError(t, os.Remove(path))
	s, err := OpenStore(path, StoreLimits{})
	require.NoError(t, err)
	require.NoError(t, os.Symlink(victim, path))
	require.NoError(t, s.Set("k", "v"))
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, `{"secret":"do not touch"}`, string(got))
	st, err := os.Lstat(path)
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular(), "state.json is now a regular file")
	var m map[string]string
	data, _ := os.ReadFile(path)
	require.NoError(t, json.Unmarshal(data, &m))
	assert.Equal(t, map[string]string{"k": "v"}, m)
}

func TestStoreFIFORefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err := OpenStore(path, StoreLimits{})
	require.ErrorIs(t, err, ErrUnsafeFile)
}

func TestStoreConcurrentSets(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(filepath.Join(dir, StateFile), StoreLimits{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				assert.NoError(t, s.Set(string(rune('a'+i)), strings.Repeat("x", j)))
			}
		}(i)
	}
	wg.Wait()
	s2, err := OpenStore(filepath.Join(dir, StateFile), StoreLimits{})
	require.NoError(t, err)
	assert.Equal(t, 8, s2.Len())
	assertNoTempFiles(t, dir)
}
