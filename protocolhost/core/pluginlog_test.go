// SPDX-License-Identifier: MIT

package core

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server that writes without end fills no disk: its log is at most PluginLogCap, the
// file before it too, and the newest bytes are kept.
func TestPluginLogBounded(t *testing.T) {
	e := &Env{StateDir: t.TempDir()}
	l := e.OpenPluginLog("flood", nil)
	line := []byte(strings.Repeat("x", 999) + "\n")
	for range 3 * PluginLogCap / len(line) {
		n, err := l.Write(line)
		require.NoError(t, err)
		require.Equal(t, len(line), n)
	}
	_, _ = l.Write([]byte("the last words\n"))
	require.NoError(t, l.Err())
	require.NoError(t, l.Close())
	cur, prev, err := e.PluginLogPaths("flood")
	require.NoError(t, err)
	for _, p := range []string{cur, prev} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.LessOrEqual(t, st.Size(), int64(PluginLogCap), p)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), p)
	}
	last, err := os.ReadFile(cur)
	require.NoError(t, err)
	assert.True(t, bytes.HasSuffix(last, []byte("the last words\n")))
	assert.LessOrEqual(t, len(l.Tail()), 4<<10, "the tail kept in memory is bounded too")
	dir, err := os.ReadDir(filepath.Join(e.StateDir, PluginLogDir))
	require.NoError(t, err)
	assert.Len(t, dir, 2, "two files, whatever was written")
}

// A link planted where the log goes leads no write elsewhere.
func TestPluginLogRefusesALink(t *testing.T) {
	e := &Env{StateDir: t.TempDir()}
	outside := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.MkdirAll(filepath.Join(e.StateDir, PluginLogDir), 0o700))
	require.NoError(t, os.Symlink(outside, filepath.Join(e.StateDir, PluginLogDir, "p.log")))
	l := e.OpenPluginLog("p", nil)
	_, _ = l.Write([]byte("words\n"))
	_ = l.Close()
	assert.NoFileExists(t, outside)
}
