// SPDX-License-Identifier: MIT

package kernel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestRulesetRefusesWhatCoversADeniedPath: whatever an allowed path names when its rule is
// made is what is checked against the denied paths, through the fd the rule is made from:
// a symlink retargeted at the denied tree's parent (after the sandbox's own check of the
// names passed) is refused, and so are the denied directory itself, an ancestor reached by
// "..", a grant of "/", a denied file granted under another name (a hard link), and the
// parent of a denied path not made yet. A grant inside the denied tree (a carve-out), a
// sibling of it and the harmless target are allowed, and a cached ruleset built while the
// link was harmless is not reused once it points at the parent.
func TestRulesetRefusesWhatCoversADeniedPath(t *testing.T) {
	abi := LandlockABI()
	testutil.SkipUnlessSupported(t, abi > 0, "no Landlock")
	d := t.TempDir()
	home := filepath.Join(d, "home")
	config := filepath.Join(home, ".config")
	denied := filepath.Join(config, "fledge")
	carve := filepath.Join(denied, "plugins", "p")
	harmless := filepath.Join(d, "proj", ".venv", "real-bin")
	for _, p := range []string{carve, harmless, filepath.Join(config, "other"), filepath.Join(d, "state")} {
		require.NoError(t, os.MkdirAll(p, 0o700))
	}
	secretFile := filepath.Join(d, "secret.key")
	require.NoError(t, os.WriteFile(secretFile, []byte("k"), 0o600))
	require.NoError(t, os.Link(secretFile, filepath.Join(d, "proj", "innocent")))
	link := filepath.Join(d, "proj", ".venv", "bin")
	require.NoError(t, os.Symlink(harmless, link))
	deny := []string{denied, secretFile, filepath.Join(d, "state", "fledge")}
	build := func(rx ...string) error {
		fd, err := LandlockRuleset(&Landlock{ABI: abi, ReadExec: rx, ReadOnly: []string{"/etc/hostname"}, Deny: deny})
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	require.NoError(t, build(link), "the link at its harmless target")
	require.NoError(t, build(carve), "a carve-out inside the denied tree")
	require.NoError(t, build(filepath.Join(config, "other")), "a sibling of the denied tree")

	// Retargeted after the names were checked: the cached ruleset is not reused, and the
	// new target is refused.
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(home, link))
	require.ErrorIs(t, build(link), ErrCoversDenied)
	for _, p := range []string{denied, config, filepath.Join(carve, "..", "..", ".."), "/", filepath.Join(d, "proj", "innocent"), filepath.Join(d, "state")} {
		assert.ErrorIs(t, build(p), ErrCoversDenied, p)
	}
	// Without denied paths, the same grants build (the check is what refuses them).
	fd, err := LandlockRuleset(&Landlock{ABI: abi, ReadExec: []string{link}})
	require.NoError(t, err)
	unix.Close(fd)
}
