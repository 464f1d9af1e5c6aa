// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ways around a read-only fledge.lock a bind mount might miss: a hard link to it made
// from inside (then written through), and a lock deeper in the project than the git scan
// looks (a monorepo's sub-project, services/api/fledge.lock, which `plugins sync` run in
// services/api reads).
func TestViewProtectsLockFileLinksAndDepth(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	deep := filepath.Join(root, "services", "api")
	require.NoError(t, os.MkdirAll(deep, 0o755))
	const lock = "version = 1\n"
	for _, d := range []string{root, deep} {
		require.NoError(t, os.WriteFile(filepath.Join(d, "fledge.lock"), []byte(lock), 0o644))
	}
	script := attemptScript + `attempt hardlink sh -c 'ln fledge.lock hl && echo evil >> hl'
attempt deep-overwrite sh -c 'echo "[[plugin]]" > services/api/fledge.lock'
attempt deep-replace sh -c 'echo evil > services/api/new && mv -f services/api/new services/api/fledge.lock'
attempt deep-dir-mv mv services/api services/api-aside
attempt deep-parent-mv mv services services-aside
`
	res, out, errOut := run(t, sb, gitAttackSpec(t, script, root, root))
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	requireRefused(t, out, "hardlink", "deep-overwrite", "deep-replace", "deep-dir-mv", "deep-parent-mv")
	for _, d := range []string{root, deep} {
		b, err := os.ReadFile(filepath.Join(d, "fledge.lock"))
		require.NoError(t, err)
		assert.Equal(t, lock, string(b), "%s unchanged on disk", d)
	}
}
