// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
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
	// Every git directory's top level, less what git writes: what git init made (its
	// templates' branches, description and info, where this git makes them) and the
	// placeholders fledge makes (commondir, modules; hooks, config, config.worktree).
	top := func(gd string, names ...string) []string {
		var out []string
		for _, n := range append(names, "branches", "description", "info") {
			if _, err := os.Lstat(filepath.Join(l.parent, gd, n)); err == nil || len(names) > 0 && slices.Contains(names, n) {
				out = append(out, gd+"/"+n)
			}
		}
		return out
	}
	var main []string
	for _, gd := range []string{"main/.git", "main/.git/modules/sub", "main/.git/modules/sub/modules/deep"} {
		main = append(main, top(gd, "config", "hooks", "config.worktree", "commondir", "modules")...)
	}
	main = append(main, top("main/.git/worktrees/wt", "commondir", "gitdir", "config.worktree", "modules")...)
	main = append(main, "main/sub/.git", "main/sub/deep/.git")
	rel := func(ps ...string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, filepath.Join(l.parent, p))
		}
		return out
	}
	without := func(ps []string, drop ...string) []string {
		var out []string
		for _, p := range ps {
			if !slices.Contains(drop, p) {
				out = append(out, p)
			}
		}
		return out
	}
	modules := rel("main/.git/modules/sub", "main/.git/modules/sub/modules/deep")
	for _, tc := range []struct {
		name      string
		roots     []string
		unprotect []string
		want, rw  []string
	}{
		{name: "superproject", roots: rel("main"), want: rel(main...), rw: modules},
		{name: "worktree only: its gitdir is outside the roots", roots: rel("wt"), want: rel("wt/.git")},
		{name: "both", roots: rel("main", "wt"), want: rel(append([]string{"wt/.git"}, main...)...), rw: modules},
		{name: "parent", roots: []string{l.parent}, want: rel(append([]string{"wt/.git"}, main...)...), rw: modules},
		{name: "submodule checkout only", roots: rel("main/sub"), want: rel("main/sub/.git", "main/sub/deep/.git")},
		{name: "opt out", roots: rel("main"), unprotect: []string{".git/config", ".git/modules/*/hooks", "sub/deep/.git", ".git/worktrees/*/config.worktree"},
			want: rel(without(main, "main/.git/config", "main/.git/modules/sub/hooks", "main/sub/deep/.git", "main/.git/worktrees/wt/config.worktree")...),
			rw:   modules},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := defaultGitProtection(tc.roots, tc.unprotect)
			require.NoError(t, err)
			assert.ElementsMatch(t, tc.want, got.Protected)
			assert.ElementsMatch(t, tc.rw, got.Writable)
		})
	}
	b, err := os.ReadFile(filepath.Join(l.main, ".git", "commondir"))
	require.NoError(t, err, "a commondir is made where there was none")
	assert.Equal(t, ".\n", string(b))
	assert.Equal(t, "init\n", gitCmd(t, l.main, "log", "-1", "--format=%s", "HEAD~1"), "and git reads it as no commondir")
	assert.Equal(t, filepath.Join(l.main, ".git")+"\n", gitCmd(t, l.main, "rev-parse", "--path-format=absolute", "--git-common-dir"))
}

// config.worktree is read once extensions.worktreeConfig is on (git sparse-checkout turns
// it on): it is made (empty) and protected in the main git directory and in every linked
// worktree's, and git still reads its settings.
func TestDefaultProtectedWorktreeConfig(t *testing.T) {
	l := newGitLayout(t)
	got, err := defaultProtected([]string{l.main}, nil)
	require.NoError(t, err)
	for _, p := range []string{".git/config.worktree", ".git/worktrees/wt/config.worktree"} {
		assert.Contains(t, got, filepath.Join(l.main, p))
		assert.FileExists(t, filepath.Join(l.main, p))
	}
	gitCmd(t, l.wt, "config", "extensions.worktreeConfig", "true")
	gitCmd(t, l.wt, "config", "--worktree", "x.y", "z")
	assert.Equal(t, "z\n", gitCmd(t, l.wt, "config", "x.y"))
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

// gitAttackSpec runs script confined, in dir, with roots writable.
func gitAttackSpec(t *testing.T, script, dir string, roots ...string) *sandbox.Spec {
	t.Helper()
	d, err := os.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return &sandbox.Spec{
		Kind:    sandbox.KindExec,
		Name:    "git attack",
		Path:    "/bin/sh",
		Args:    []string{"sh", "-c", script},
		Dir:     d,
		DirPath: dir,
		Env:     append([]string{"PATH=/usr/bin:/bin", "HOME=" + dir}, gitTestEnv...),
		Access: sandbox.Access{
			ReadWrite: roots,
			ReadExec:  SystemReadExec,
		},
		PrivateTmp: true,
		Limits:     sandbox.Limits{Timeout: time.Minute, KillGrace: 500 * time.Millisecond},
	}
}

// attemptScript wraps attack lines: each "attempt NAME CMD..." prints "NAME refused" or
// "NAME DONE".
const attemptScript = `attempt() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name DONE"; else echo "$name refused"; fi; }
`

// snapshot is every regular file's content and every directory under dirs, as the host
// sees them.
func snapshot(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range dirs {
		require.NoError(t, filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case e.IsDir():
				out[p] = "dir"
			case e.Type().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				out[p] = string(b)
			}
			return nil
		}))
	}
	return out
}

func requireRefused(t *testing.T, out string, names ...string) {
	t.Helper()
	for _, n := range names {
		assert.Contains(t, out, n+" refused\n", "%s from a confined command", n)
		assert.NotContains(t, out, n+" DONE\n", "%s from a confined command", n)
	}
}

// TestViewProtectsWorktreeGit attacks a linked worktree (made by git worktree add) with
// the worktree and the main checkout writable, from inside the worktree: planting a hook
// where the worktree's git looks for hooks, editing the config, redirecting commondir,
// rewriting, removing or moving the .git file, and moving the worktree's git directory
// aside all fail and leave the disk unchanged, while git commit in the worktree works.
func TestViewProtectsWorktreeGit(t *testing.T) {
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			requireView(t, sb)
			l := newGitLayout(t)
			gitdir := filepath.Join(l.main, ".git", "worktrees", "wt")
			script := attemptScript + `gd=$(git rev-parse --git-dir); hooks=$(git rev-parse --git-path hooks); common=$(git rev-parse --git-common-dir)
[ "$hooks" = "` + filepath.Join(l.main, ".git", "hooks") + `" ] || echo "unexpected hooks dir $hooks"
attempt hook sh -c 'printf "#!/bin/sh\necho pwned\n" > "$1/post-checkout"' sh "$hooks"
attempt git-config git config core.fsmonitor ./evil
attempt config sh -c 'printf "[alias]\n\tst = !./evil\n" >> "$1/config"' sh "$common"
attempt commondir sh -c 'echo /tmp/evil > "$1/commondir"' sh "$gd"
attempt worktree-config sh -c 'echo "[core]" > "$1/config.worktree"' sh "$gd"
attempt rewrite-dotgit sh -c 'echo "gitdir: /tmp/evil" > .git'
attempt rm-dotgit rm -f .git
attempt mv-dotgit mv .git .git-aside
attempt mv-gitdir mv "$gd" "$gd-aside"
attempt mv-worktrees mv "$common/worktrees" "$common/worktrees-aside"
echo hi > file && git add file && git commit -q -m "from the worktree" && git log -1 --format=%s`
			before := snapshot(t, filepath.Join(l.main, ".git", "hooks"), filepath.Join(l.main, ".git", "config"), gitdir, filepath.Join(l.wt, ".git"))
			spec := gitAttackSpec(t, script, l.wt, l.main, l.wt)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			requireRefused(t, out, "hook", "git-config", "config", "commondir", "worktree-config", "rewrite-dotgit", "rm-dotgit", "mv-dotgit", "mv-gitdir", "mv-worktrees")
			assert.NotContains(t, out, "unexpected")
			assert.True(t, strings.HasSuffix(out, "from the worktree\n"), "git commit in the worktree works: %s\n%s", out, errOut)

			after := snapshot(t, filepath.Join(l.main, ".git", "hooks"), filepath.Join(l.main, ".git", "config"), gitdir, filepath.Join(l.wt, ".git"))
			for _, p := range []string{filepath.Join(l.main, ".git", "config"), filepath.Join(gitdir, "commondir"), filepath.Join(l.wt, ".git")} {
				assert.Equal(t, before[p], after[p], "%s unchanged on disk", p)
			}
			assert.NoFileExists(t, filepath.Join(l.main, ".git", "hooks", "post-checkout"))
			wtc, err := os.ReadFile(filepath.Join(gitdir, "config.worktree"))
			require.NoError(t, err, "made empty by fledge before the run")
			assert.Empty(t, string(wtc))
			assert.NoDirExists(t, gitdir+"-aside")
			assert.NoFileExists(t, filepath.Join(l.wt, ".git-aside"))
			assert.Equal(t, "from the worktree\n", gitCmd(t, l.wt, "log", "-1", "--format=%s"), "the commit is on disk")
		})
	}
}

// TestViewProtectsSubmoduleGit attacks a submodule (made by git submodule add, with a
// nested submodule) with the superproject writable, from inside the submodule: planting a
// hook in .git/modules/sub/hooks (and the nested one's), editing the submodule's config,
// rewriting, removing or moving its .git file, moving its git directory, modules/ or the
// checkout aside all fail and leave the disk unchanged, while git commit in the submodule
// works.
func TestViewProtectsSubmoduleGit(t *testing.T) {
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			requireView(t, sb)
			l := newGitLayout(t)
			sub := filepath.Join(l.main, "sub")
			modules := filepath.Join(l.main, ".git", "modules")
			script := attemptScript + `hooks=$(git rev-parse --git-path hooks); gd=$(git rev-parse --git-dir)
[ "$hooks" = "` + filepath.Join(modules, "sub", "hooks") + `" ] || echo "unexpected hooks dir $hooks"
attempt hook sh -c 'printf "#!/bin/sh\necho pwned\n" > "$1/post-checkout"' sh "$hooks"
attempt deep-hook sh -c 'printf "#!/bin/sh\necho pwned\n" > "$1/sub/modules/deep/hooks/post-checkout"' sh "` + modules + `"
attempt git-config git config core.fsmonitor ./evil
attempt config sh -c 'printf "[alias]\n\tst = !./evil\n" >> "$1/config"' sh "$gd"
attempt deep-config git -C deep config core.fsmonitor ./evil
attempt rewrite-dotgit sh -c 'echo "gitdir: ../evil" > .git'
attempt rm-dotgit rm -f .git
attempt mv-dotgit mv .git .git-aside
attempt rm-deep-dotgit rm -f deep/.git
attempt mv-gitdir mv "$gd" "$gd-aside"
attempt mv-modules mv "` + modules + `" "` + modules + `-aside"
attempt mv-checkout mv "` + sub + `" "` + sub + `-aside"
echo hi > file && git add file && git commit -q -m "from the submodule" && git log -1 --format=%s`
			before := snapshot(t, modules, filepath.Join(sub, ".git"), filepath.Join(sub, "deep", ".git"))
			spec := gitAttackSpec(t, script, sub, l.main)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			requireRefused(t, out, "hook", "deep-hook", "git-config", "config", "deep-config", "rewrite-dotgit", "rm-dotgit", "mv-dotgit", "rm-deep-dotgit", "mv-gitdir", "mv-modules", "mv-checkout")
			assert.NotContains(t, out, "unexpected")
			assert.True(t, strings.HasSuffix(out, "from the submodule\n"), "git commit in the submodule works: %s\n%s", out, errOut)

			after := snapshot(t, modules, filepath.Join(sub, ".git"), filepath.Join(sub, "deep", ".git"))
			for p, was := range before {
				if strings.HasSuffix(p, "/config") || strings.Contains(p, "/hooks") || strings.HasSuffix(p, "/.git") {
					assert.Equal(t, was, after[p], "%s unchanged on disk", p)
				}
			}
			for p := range after {
				if strings.Contains(p, "/hooks/") {
					assert.Contains(t, before, p, "%s planted", p)
				}
			}
			for _, p := range []string{modules + "-aside", sub + "-aside", filepath.Join(modules, "sub-aside")} {
				assert.NoDirExists(t, p)
			}
			assert.NoFileExists(t, filepath.Join(sub, ".git-aside"))
			assert.Equal(t, "from the submodule\n", gitCmd(t, sub, "log", "-1", "--format=%s"), "the commit is on disk")
		})
	}
}

// TestViewUnprotectOptOut: with .git/config opted out, a confined git config succeeds on
// disk, while the hooks stay protected.
func TestViewUnprotectOptOut(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	spec := gitAttackSpec(t, attemptScript+`attempt git-config git config x.y z
attempt hook sh -c 'echo evil > .git/hooks/post-checkout'`, root, root)
	spec.Access.Unprotect = []string{".git/config"}
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, "git-config DONE\nhook refused\n", out)
	assert.Equal(t, "z\n", gitCmd(t, root, "config", "x.y"), "written on disk")
	assert.NoFileExists(t, filepath.Join(root, ".git", "hooks", "post-checkout"))
}

// TestViewProtectsFromInsideGitDir: a command whose working directory is inside .git (or
// is the protected hooks directory itself) still meets the protection through relative
// paths.
func TestViewProtectsFromInsideGitDir(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) { testProtectsFromInsideGitDir(t, l.opts) })
	}
}

func testProtectsFromInsideGitDir(t *testing.T, opts Options) {
	sb := newSandbox(t, opts)
	requireView(t, sb)
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	for _, tc := range []struct{ dir, script string }{
		{".git", `attempt hook sh -c 'echo evil > hooks/post-checkout'
attempt config sh -c 'echo "[alias]" >> config'`},
		{".git/hooks", `attempt hook sh -c 'echo evil > post-checkout'
attempt config sh -c 'echo "[alias]" >> ../config'`},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			cfg, err := os.ReadFile(filepath.Join(root, ".git", "config"))
			require.NoError(t, err)
			spec := gitAttackSpec(t, attemptScript+tc.script, filepath.Join(root, tc.dir), root)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			assert.Equal(t, "hook refused\nconfig refused\n", out)
			assert.NoFileExists(t, filepath.Join(root, ".git", "hooks", "post-checkout"))
			now, err := os.ReadFile(filepath.Join(root, ".git", "config"))
			require.NoError(t, err)
			assert.Equal(t, string(cfg), string(now))
		})
	}
}

// The search for repositories below a root stops at its bound without refusing the run
// (a node_modules-like tree), and the root's own repository is always protected.
func TestDefaultProtectedScanBound(t *testing.T) {
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	var wide []string
	for i := 0; i < maxScanDirs+10; i++ {
		w := filepath.Join(root, fmt.Sprintf("w%d", i))
		require.NoError(t, os.MkdirAll(filepath.Join(w, "lib"), 0o755))
		wide = append(wide, w)
	}
	nested := filepath.Join(root, "vendor")
	gitCmd(t, root, "init", "-q", nested)
	bare := filepath.Join(root, "origin.git")
	gitCmd(t, root, "init", "-q", "--bare", bare)
	got, err := defaultProtected([]string{root}, nil)
	require.NoError(t, err)
	assert.Contains(t, got, filepath.Join(root, ".git", "config"))
	assert.Contains(t, got, filepath.Join(root, ".git", "hooks"))
	deep := filepath.Join(root, "a", "b")
	gitCmd(t, root, "init", "-q", deep)

	// Below the bound, a clone one level down is found.
	for _, w := range wide {
		require.NoError(t, os.RemoveAll(w))
	}
	got, err = defaultProtected([]string{root}, nil)
	require.NoError(t, err)
	assert.Contains(t, got, filepath.Join(nested, ".git", "hooks"))
	assert.Contains(t, got, filepath.Join(nested, ".git", "config"))
	assert.Contains(t, got, filepath.Join(bare, "hooks"), "a push to a bare repository runs its hooks")
	assert.Contains(t, got, filepath.Join(bare, "config"))
	assert.NotContains(t, got, filepath.Join(deep, ".git", "hooks"), "two levels down is past maxScanDepth")
}

// BenchmarkDefaultProtectedWideTree is the per-launch cost of finding the protected set in
// a project with a repository and a node_modules-like tree of 3000 directories.
func BenchmarkDefaultProtectedWideTree(b *testing.B) {
	root := b.TempDir()
	if err := exec.Command("git", "init", "-q", root).Run(); err != nil {
		b.Skip("needs git")
	}
	for i := 0; i < 3000; i++ {
		if err := os.MkdirAll(filepath.Join(root, "node_modules", fmt.Sprintf("p%d", i), "lib"), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := defaultProtected([]string{root}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
