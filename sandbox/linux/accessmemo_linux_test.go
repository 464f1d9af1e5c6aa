package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
)

// TestAccessMemoRechecksChangedPaths: a remembered verdict holds only while every path still
// names what it named. A granted symlink retargeted at a denied tree's parent, a granted
// path that appears (as such a link) after it was absent, and a denied path replaced by a
// link are each refused on the next check, as checkAccess alone refuses them.
func TestAccessMemoRechecksChangedPaths(t *testing.T) {
	d := t.TempDir()
	secret := filepath.Join(d, "home", "secret")
	work := filepath.Join(d, "work")
	for _, p := range []string{secret, work, filepath.Join(d, "elsewhere")} {
		require.NoError(t, os.MkdirAll(p, 0o700))
	}
	link := filepath.Join(d, "link")
	require.NoError(t, os.Symlink(work, link))
	absent := filepath.Join(d, "later")
	a := &sandbox.Access{ReadWrite: []string{link, absent}, ReadOnly: []string{"/etc"}, Deny: []string{secret}}

	var m accessMemo
	require.NoError(t, m.check(a))
	require.NoError(t, m.check(a), "remembered")
	require.Len(t, m.m, 1)

	// The link now leads to the denied tree's parent: the grant would cover it.
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(filepath.Join(d, "home"), link))
	require.ErrorIs(t, checkAccess(a), sandbox.ErrInvalidSpec, "the check alone refuses it")
	require.ErrorIs(t, m.check(a), sandbox.ErrInvalidSpec, "the remembered verdict is not used")

	// Back as it was: accepted again; then the absent grant appears as a link to the parent.
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(work, link))
	require.NoError(t, m.check(a))
	require.NoError(t, os.Symlink(filepath.Join(d, "home"), absent))
	require.ErrorIs(t, m.check(a), sandbox.ErrInvalidSpec)
	require.NoError(t, os.Remove(absent))
	require.NoError(t, m.check(a))

	// The denied path becomes a link into a granted tree: refused too.
	moved := filepath.Join(d, "home", "secret-old")
	require.NoError(t, os.Rename(secret, moved))
	require.NoError(t, os.Symlink(filepath.Join(work, "x"), secret))
	require.NoError(t, os.Mkdir(filepath.Join(work, "x"), 0o700))
	require.ErrorIs(t, m.check(a), sandbox.ErrInvalidSpec)
}

// TestAccessMemoKeysEveryList: the same paths in another list, or another extra, are other
// keys (a verdict is never borrowed from different lists).
func TestAccessMemoKeysEveryList(t *testing.T) {
	d := t.TempDir()
	denied := filepath.Join(d, "denied")
	require.NoError(t, os.Mkdir(denied, 0o700))
	var m accessMemo
	ok := &sandbox.Access{ReadOnly: []string{"/etc"}, Deny: []string{denied}}
	require.NoError(t, m.check(ok))
	bad := &sandbox.Access{ReadOnly: []string{"/etc"}, ReadWrite: []string{d}, Deny: []string{denied}}
	require.ErrorIs(t, m.check(bad), sandbox.ErrInvalidSpec)
	require.ErrorIs(t, m.check(ok, d), sandbox.ErrInvalidSpec, "an extra path covering the denied one")
	require.NoError(t, m.check(ok))
}
