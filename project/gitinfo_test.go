// SPDX-License-Identifier: MIT

package project

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingRunner runs git for real (Local) and counts the calls.
func countingRunner(n *int) Runner {
	return func(ctx context.Context, dir string, argv, env []string, maxOut int) ([]byte, error) {
		*n++
		return Local(ctx, dir, argv, env, maxOut)
	}
}

// Outside any repository the git info is nil without running git: the host's git is a
// whole confined launch.
func TestReadGitInfoOutsideRepoRunsNoGit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	if mayBeInRepo(dir) {
		t.Skipf("a .git above %s: cannot test outside a repository here", dir)
	}
	calls := 0
	assert.Nil(t, ReadGitInfoWith(context.Background(), countingRunner(&calls), dir))
	assert.Zero(t, calls, "git ran outside any repository")
	// git itself agrees: not a work tree.
	_, err := Git(context.Background(), dir, "rev-parse", "--is-inside-work-tree")
	assert.Error(t, err)
}

// A `.git` at or above the root, directory or file, leaves the answer to git, which finds
// the same repository as before.
func TestReadGitInfoInsideRepoRunsGit(t *testing.T) {
	repo := t.TempDir()
	git(t, repo, "init", "-q", "-b", "trunk")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "f"), []byte("x"), 0o644))
	git(t, repo, "add", "f")
	git(t, repo, "commit", "-q", "-m", "one")
	sub := filepath.Join(repo, "deep", "er")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	wt := filepath.Join(t.TempDir(), "wt")
	git(t, repo, "worktree", "add", "-q", "-b", "side", wt)
	_, err := os.Lstat(filepath.Join(wt, ".git"))
	require.NoError(t, err)

	for _, c := range []struct{ dir, branch string }{{repo, "trunk"}, {sub, "trunk"}, {wt, "side"}} {
		calls := 0
		gi := ReadGitInfoWith(context.Background(), countingRunner(&calls), c.dir)
		require.NotNil(t, gi, c.dir)
		assert.Equal(t, c.branch, gi.Branch, c.dir)
		assert.NotZero(t, calls, c.dir)
	}
}
