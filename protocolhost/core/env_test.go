// SPDX-License-Identifier: MIT

package core

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fledgehq/fledge/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A PATH entry that is a symlink into $HOME must not hand commands the home directory:
// Landlock would follow the link, so policy must judge the resolved path.
func TestPathsResolveSymlinkedPATHEntries(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
	innocent := filepath.Join(root, "tools", "bin")
	require.NoError(t, os.MkdirAll(filepath.Dir(innocent), 0o755))
	require.NoError(t, os.Symlink(home, innocent))
	t.Setenv("HOME", home)
	t.Setenv("PATH", innocent+":/usr/bin")

	e := &Env{ConfigDir: filepath.Join(home, ".config", "fledge"), StateDir: filepath.Join(home, ".local", "state", "fledge"),
		AuditPath: filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), Config: policy.Default()}
	p := e.Paths(filepath.Join(e.ConfigDir, "plugins", "x"), filepath.Join(e.ConfigDir, "plugins", "x", "data"), nil)
	assert.Contains(t, p.UserPATH, home, "the entry is judged as what it points to")
	a := policy.ExecAccess(p, e.Config)
	for _, x := range append(append(a.ReadExec, a.ReadOnly...), a.ReadWrite...) {
		assert.NotEqual(t, innocent, x)
		assert.NotEqual(t, home, x)
	}
}
