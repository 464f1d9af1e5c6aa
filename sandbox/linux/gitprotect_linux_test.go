package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/internal/testutil"
)

var gitTestEnv = []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t",
	"GIT_COMMITTER_EMAIL=t@t.invalid", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}

// gitLayout is a real superproject with a submodule that has a submodule of its own, and a
// linked worktree beside it, made by git itself under one parent directory:
//
//	parent/main             the superproject (.git directory)
//	parent/main/sub         submodule checkout (.git file -> ../.git/modules/sub)
//	parent/main/sub/deep    nested submodule (.git file -> .git/modules/sub/modules/deep)
//	parent/wt               linked worktree (.git file -> main/.git/worktrees/wt)
type gitLayout struct {
	parent, main, wt string
}

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	git, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	c := exec.Command(git, append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"}, args...)...)
	c.Dir = dir
	c.Env = append(os.Environ(), gitTestEnv...)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return string(out)
}

func newGitLayout(t *testing.T) *gitLayout {
	t.Helper()
	parent := t.TempDir()
	src := t.TempDir() // the submodules' upstreams: outside every root
	for _, name := range []string{"deep", "lib"} {
		d := filepath.Join(src, name)
		gitCmd(t, src, "init", "-q", d)
		gitCmd(t, d, "commit", "-q", "--allow-empty", "-m", name)
	}
	gitCmd(t, filepath.Join(src, "lib"), "submodule", "add", "-q", filepath.Join(src, "deep"), "deep")
	gitCmd(t, filepath.Join(src, "lib"), "commit", "-q", "-m", "deep")
	l := &gitLayout{parent: parent, main: filepath.Join(parent, "main"), wt: filepath.Join(parent, "wt")}
	gitCmd(t, parent, "init", "-q", l.main)
	gitCmd(t, l.main, "commit", "-q", "--allow-empty", "-m", "init")
	gitCmd(t, l.main, "submodule", "add", "-q", filepath.Join(src, "lib"), "sub")
	gitCmd(t, l.main, "submodule", "update", "-q", "--init", "--recursive")
	gitCmd(t, l.main, "commit", "-q", "-m", "sub")
	gitCmd(t, l.main, "worktree", "add", "-q", l.wt)
	return l
}

func TestDefaultProtectedFollowsEveryGitDir(t *testing.T) {
	l := newGitLayout(t)
	main := []string{
		"main/.git/config", "main/.git/hooks",
		"main/.git/modules/sub/config", "main/.git/modules/sub/hooks",
		"main/.git/modules/sub/modules/deep/config", "main/.git/modules/sub/modules/deep/hooks",
		"main/.git/worktrees/wt/commondir",
		"main/sub/.git", "main/sub/deep/.git",
	}
	rel := func(ps ...string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Join(l.parent, p))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		roots     []string
		unprotect []string
		want      []string
	}{
		{name: "superproject", roots: rel("main"), want: rel(main...)},
		{name: "worktree only: its gitdir is outside the roots", roots: rel("wt"), want: rel("wt/.git")},
		{name: "both", roots: rel("main", "wt"), want: rel(append([]string{"wt/.git"}, main...)...)},
		{name: "parent", roots: []string{l.parent}, want: rel(append([]string{"wt/.git"}, main...)...)},
		{name: "submodule checkout only", roots: rel("main/sub"), want: rel("main/sub/.git", "main/sub/deep/.git")},
		{name: "opt out", roots: rel("main"), unprotect: []string{".git/config", ".git/modules/*/hooks", "sub/deep/.git"},
			want: rel("main/.git/hooks",
				"main/.git/modules/sub/config",
				"main/.git/modules/sub/modules/deep/config", "main/.git/modules/sub/modules/deep/hooks",
				"main/.git/worktrees/wt/commondir", "main/sub/.git")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := defaultProtected(tc.roots, tc.unprotect)
			require.NoError(t, err)
			assert.ElementsMatch(t, tc.want, got)
		})
	}
}

// With extensions.worktreeConfig on, config.worktree is read: it is made (empty) and
// protected in the main git directory and in every linked worktree's.
func TestDefaultProtectedWorktreeConfig(t *testing.T) {
	l := newGitLayout(t)
	gitCmd(t, l.main, "config", "extensions.worktreeConfig", "true")
	got, err := defaultProtected([]string{l.main}, nil)
	require.NoError(t, err)
	for _, p := range []string{".git/config.worktree", ".git/worktrees/wt/config.worktree"} {
		assert.Contains(t, got, filepath.Join(l.main, p))
		assert.FileExists(t, filepath.Join(l.main, p))
	}
}

// core.hooksPath inside the project (husky) and an included config file are routes too.
func TestDefaultProtectedHooksPathAndIncludes(t *testing.T) {
	l := newGitLayout(t)
	gitCmd(t, l.main, "config", "core.hooksPath", ".husky/_")
	require.NoError(t, os.Mkdir(filepath.Join(l.main, ".husky"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(l.main, "shared.gitconfig"), nil, 0o644))
	gitCmd(t, l.main, "config", "include.path", "../shared.gitconfig")
	got, err := defaultProtected([]string{l.main}, nil)
	require.NoError(t, err)
	assert.Contains(t, got, filepath.Join(l.main, ".husky/_"))
	assert.DirExists(t, filepath.Join(l.main, ".husky/_"), "made so it cannot be made with a hook in it")
	assert.Contains(t, got, filepath.Join(l.main, "shared.gitconfig"))

	got, err = defaultProtected([]string{l.main}, []string{"core.hooksPath", "include.path"})
	require.NoError(t, err)
	assert.NotContains(t, got, filepath.Join(l.main, ".husky/_"))
	assert.NotContains(t, got, filepath.Join(l.main, "shared.gitconfig"))
	assert.Contains(t, got, filepath.Join(l.main, ".git/config"))
}

// A symlink cannot be kept by a read-only mount (the link itself could be replaced): the
// launch is refused, unless policy opts out of that path.
func TestDefaultProtectedRefusesSymlinks(t *testing.T) {
	l := newGitLayout(t)
	hooks := filepath.Join(l.main, ".git", "hooks")
	require.NoError(t, os.RemoveAll(hooks))
	require.NoError(t, os.Mkdir(filepath.Join(l.main, "githooks"), 0o755))
	require.NoError(t, os.Symlink("../githooks", hooks))
	_, err := defaultProtected([]string{l.main}, nil)
	require.ErrorIs(t, err, errGitProtect)
	assert.Contains(t, err.Error(), hooks+" is a symlink")

	got, err := defaultProtected([]string{l.main}, []string{".git/hooks"})
	require.NoError(t, err)
	assert.NotContains(t, got, hooks)
}

// A repository with more submodule git directories than the bound fails closed.
func TestDefaultProtectedBound(t *testing.T) {
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	for i := 0; i < maxGitDirs; i++ { // with the repository itself: one over the bound
		d := filepath.Join(root, ".git", "modules", fmt.Sprintf("m%d", i))
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
	}
	_, err := defaultProtected([]string{root}, nil)
	require.ErrorIs(t, err, errGitProtect)
	assert.Contains(t, err.Error(), fmt.Sprintf("more than %d git directories", maxGitDirs))

	deep := filepath.Join(t.TempDir(), "r")
	gitCmd(t, filepath.Dir(deep), "init", "-q", deep)
	require.NoError(t, os.MkdirAll(filepath.Join(deep, ".git", "modules", strings.Repeat("x/", maxModuleDepth+1)), 0o755))
	_, err = defaultProtected([]string{deep}, nil)
	require.ErrorIs(t, err, errGitProtect)
	assert.Contains(t, err.Error(), "directories deep below modules/")
}

func TestPinsFor(t *testing.T) {
	got := pinsFor([]string{"/r/.git/modules/a/b/hooks", "/r/.git/config", "/r/wt/.git", "/r/x", "/elsewhere/y"},
		[]string{"/r", "/r/wt"})
	assert.Equal(t, []string{"/r/.git", "/r/.git/modules", "/r/.git/modules/a", "/r/.git/modules/a/b", "/r/wt"}, got)
}
