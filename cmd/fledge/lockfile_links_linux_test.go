// SPDX-License-Identifier: MIT

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fledge.lock with a second hard link is refused by sync: the view keeps the path
// fledge.lock read-only, not the file, so a link a confined command made (to a file of its
// own, when there was no lock yet) would let it rewrite the lock through that file later.
func TestPluginsSyncRefusesHardLinkedLock(t *testing.T) {
	m := newManagedMachine(t)
	require.NoError(t, os.MkdirAll(filepath.Join(m.work, ".git"), 0o755))
	m.plugin("st", "store = true")
	_, errOut, code := m.run("--ni", "plugins", "install", filepath.Join(m.work, "st"), "--yes")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = m.run("plugins", "lock")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = m.run("plugins", "remove", "st")
	require.Equal(t, 0, code, errOut)
	lock := filepath.Join(m.work, "fledge.lock")
	own := filepath.Join(m.work, "notes.txt")
	require.NoError(t, os.Rename(lock, own))
	require.NoError(t, os.Link(own, lock))

	_, errOut, code = m.run("--ni", "plugins", "sync")
	assert.NotEqual(t, 0, code, errOut)
	assert.Contains(t, errOut, "hard link")
	out, _, _ := m.run("plugins", "list")
	assert.Contains(t, out, "no plugins installed", "nothing synced from a lock another file can rewrite")
}
