// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// indexDotGitAttack records a hook in the index under the path .git/hooks/post-checkout:
// it writes the blob (objects/ is writable), adds it as Xgit/hooks/post-checkout (git
// add refuses a .git path) and renames the entry in the index's bytes, fixing the
// checksum (the index is writable). git checks paths when it adds them to the index, not
// when it checks the index out: the user's `git checkout -- .` or `git restore .` (the
// natural way to throw away what a plugin changed) writes the hook into the real
// .git/hooks, outside any sandbox, and runs it.
const indexDotGitAttack = `set -e
printf '#!/bin/sh\ntouch %s/hook-ran\n' "$MARKS" > payload
b=$(git hash-object -w payload); rm payload
git update-index --add --cacheinfo 100755,$b,Xgit/hooks/post-checkout
python3 -c '
import hashlib
d = bytearray(open(".git/index", "rb").read())
i = d.find(b"Xgit/hooks/post-checkout"); d[i:i+4] = b".git"
d = d[:-20]; d += hashlib.sha1(d).digest()
open(".git/index", "wb").write(d)'
echo armed
`

// userRestore is the user's own git restore of the working tree from the index.
func userRestore(t *testing.T, dir string) {
	t.Helper()
	c := exec.Command("git", "checkout", "--", ".")
	c.Dir = dir
	c.Env = append(os.Environ(), gitTestEnv...)
	_ = c.Run()
}

// TestGitIndexDotGitAttackControl: unconfined, the attack's index makes the user's
// git checkout -- . write and run the hook.
func TestGitIndexDotGitAttackControl(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	_, err = exec.LookPath("python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs python3")
	root := newRepo(t)
	marks := t.TempDir()
	c := exec.Command("/bin/sh", "-c", indexDotGitAttack)
	c.Dir = root
	c.Env = append(os.Environ(), append(gitTestEnv, "MARKS="+marks)...)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	userRestore(t, root)
	assert.FileExists(t, filepath.Join(root, ".git", "hooks", "post-checkout"))
	assert.FileExists(t, filepath.Join(marks, "hook-ran"), "unconfined, git checkout -- . writes the hook and runs it")
}

// TestViewGitIndexDotGitEntry: the same from a confined command. The hooks directory is
// read-only for the command, but the index it must be able to write carries the hook to
// the user's git, which writes it into .git/hooks and runs it: the index should be checked
// after the run (an entry git's verify_path refuses, a .git path component in any case,
// quarantines it as an unreadable index does).
func TestViewGitIndexDotGitEntry(t *testing.T) {
	_, err := exec.LookPath("python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs python3")
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			root := newRepo(t)
			marks := t.TempDir()
			spec := gitAttackSpec(t, indexDotGitAttack, root, root)
			spec.Env = append(spec.Env, "MARKS="+marks)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Equal(t, "armed\n", out, errOut)
			userRestore(t, root)
			requireNoMarks(t, marks)
			assert.NoFileExists(t, filepath.Join(root, ".git", "hooks", "post-checkout"), "the user's git wrote the command's hook: %+v", res.Quarantined)
		})
	}
}
