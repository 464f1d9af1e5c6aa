// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fledgehq/fledge/internal/filestamp"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/stretchr/testify/require"
)

func handshakeWith(tool string) []byte {
	return []byte(`{"name":"p","version":"1.0.0","description":"d","hooks":[],"priority":500,"tools":[{"name":"` +
		tool + `","description":"x","parameters":[]}]}`)
}

// TestRecordedFollowsTheFile: the tools listed from a plugin's recorded handshake follow
// the file at every call: rewritten in place (same size) just now, or rewritten and left
// to settle (then only its stamp tells), or replaced.
func TestRecordedFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, plugin.HandshakeFile)
	b := &core.Binding{Entry: &plugin.Entry{Name: "p"}, Dir: dir}
	p := New(nil)
	tool := func() string {
		t.Helper()
		m, err := p.recorded(b)
		require.NoError(t, err)
		require.Len(t, m.Tools, 1)
		return m.Tools[0].Name
	}
	require.NoError(t, os.WriteFile(path, handshakeWith("aa"), 0o644))
	require.Equal(t, "aa", tool())
	require.NoError(t, os.WriteFile(path, handshakeWith("bb"), 0o644)) // in place, same size
	require.Equal(t, "bb", tool())

	time.Sleep(filestamp.Settle + 100*time.Millisecond)
	require.Equal(t, "bb", tool()) // read once more, now vouched for by its stamp
	require.Equal(t, "bb", tool())
	require.NoError(t, os.WriteFile(path, handshakeWith("cc"), 0o644))
	time.Sleep(filestamp.Settle + 100*time.Millisecond)
	require.Equal(t, "cc", tool(), "a settled rewrite is seen by its stamp")

	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, handshakeWith("dd"), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	require.Equal(t, "dd", tool())
	require.NoError(t, os.Remove(path))
	_, err := p.recorded(b)
	require.Error(t, err, "no recorded handshake: reinstall")
}
