// SPDX-License-Identifier: MIT

package project

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// referenceGitInfo is the git info as read one question per git call (rev-parse,
// symbolic-ref, status --porcelain, remote, remote get-url): what the fewer calls must
// still answer.
func referenceGitInfo(t *testing.T, root string) *GitInfo {
	t.Helper()
	ctx := context.Background()
	inside, err := Git(ctx, root, "rev-parse", "--is-inside-work-tree")
	if err != nil || strings.TrimSpace(inside) != "true" {
		return nil
	}
	gi := &GitInfo{}
	if b, err := Git(ctx, root, "symbolic-ref", "--quiet", "--short", "HEAD"); err == nil {
		gi.Branch = strings.TrimSpace(b)
	} else if b, err := Git(ctx, root, "rev-parse", "--short", "HEAD"); err == nil {
		gi.Branch = strings.TrimSpace(b)
	}
	if st, err := Git(ctx, root, "status", "--porcelain"); err == nil {
		gi.Dirty = strings.TrimSpace(st) != ""
	}
	if rs, err := Git(ctx, root, "remote"); err == nil {
		remotes := trimLines(rs)
		pick := ""
		for _, r := range remotes {
			if r == "origin" {
				pick = r
			}
		}
		if pick == "" && len(remotes) > 0 {
			pick = remotes[0]
		}
		if pick != "" {
			gi.Remote = pick
			if u, err := Git(ctx, root, "remote", "get-url", pick); err == nil {
				gi.RemoteURL = strings.TrimSpace(u)
			}
		}
	}
	return gi
}

// The branch, dirtiness and remote read with fewer git calls are what one question per
// call reads, in every state a work tree can be in.
func TestReadGitInfoMatchesOneCallPerQuestion(t *testing.T) {
	commit := func(dir, name string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644))
		git(t, dir, "add", "-f", name)
		git(t, dir, "commit", "-q", "-m", name)
	}
	newRepo := func() string {
		d := t.TempDir()
		git(t, d, "init", "-q", "-b", "main")
		return d
	}
	cases := map[string]func() string{
		"clean with origin": func() string {
			d := newRepo()
			commit(d, "a")
			git(t, d, "remote", "add", "upstream", "https://example.com/up.git")
			git(t, d, "remote", "add", "origin", "https://example.com/o.git")
			return d
		},
		"other remote only": func() string {
			d := newRepo()
			commit(d, "a")
			git(t, d, "remote", "add", "fork", "git@example.com:f.git")
			return d
		},
		"modified": func() string {
			d := newRepo()
			commit(d, "a")
			require.NoError(t, os.WriteFile(filepath.Join(d, "a"), []byte("changed"), 0o644))
			return d
		},
		"untracked only": func() string {
			d := newRepo()
			commit(d, "a")
			require.NoError(t, os.WriteFile(filepath.Join(d, "new"), nil, 0o644))
			return d
		},
		"ignored only": func() string {
			d := newRepo()
			require.NoError(t, os.WriteFile(filepath.Join(d, ".gitignore"), []byte("junk\n"), 0o644))
			commit(d, ".gitignore")
			require.NoError(t, os.WriteFile(filepath.Join(d, "junk"), nil, 0o644))
			return d
		},
		"unborn branch": func() string { return newRepo() },
		"detached": func() string {
			d := newRepo()
			commit(d, "a")
			commit(d, "b")
			git(t, d, "checkout", "-q", "--detach", "HEAD~1")
			return d
		},
		"branch with a slash": func() string {
			d := newRepo()
			commit(d, "a")
			git(t, d, "checkout", "-q", "-b", "feature/x")
			return d
		},
		"subdirectory": func() string {
			d := newRepo()
			commit(d, "a")
			sub := filepath.Join(d, "s", "t")
			require.NoError(t, os.MkdirAll(sub, 0o755))
			return sub
		},
		"bare repository": func() string {
			d := t.TempDir()
			git(t, d, "init", "-q", "--bare")
			return d
		},
		"inside the git directory": func() string {
			d := newRepo()
			commit(d, "a")
			return filepath.Join(d, ".git")
		},
		"a .git that is no repository": func() string {
			d := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(d, ".git"), []byte("not a gitfile\n"), 0o644))
			return d
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			dir := mk()
			want := referenceGitInfo(t, dir)
			calls := 0
			got := ReadGitInfoWith(context.Background(), countingRunner(&calls), dir)
			assert.Equal(t, want, got)
			if want != nil && want.Remote == "" && name != "detached" {
				assert.LessOrEqual(t, calls, 2, "status and remote")
			}
		})
	}
}
