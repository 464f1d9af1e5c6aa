// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// plantEvilCommon is shell that makes $1 a git common directory whose config runs
// $2/fsmonitor-ran as core.fsmonitor and has an alias running $2/alias-ran, and whose
// pre-commit hook makes $2/hook-ran: everything the user's git would run from it.
const plantEvilCommon = `plant() {
  d=$1; m=$2
  mkdir -p "$d/hooks" "$d/objects" "$d/refs/heads" "$d/info"
  cp -R .git/objects/. "$d/objects/" 2>/dev/null
  cp -R .git/refs/. "$d/refs/" 2>/dev/null
  printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch %s/fsmonitor-ran; false"\n[alias]\n\tst = "!touch %s/alias-ran"\n' "$m" "$m" > "$d/config"
  printf '#!/bin/sh\ntouch %s/hook-ran\n' "$m" > "$d/hooks/pre-commit"
  chmod +x "$d/hooks/pre-commit"
}
`

// commondirAttack plants an evil common directory in the project and points the main
// repository's .git/commondir at it, every way there is to put a file in place.
const commondirAttack = plantEvilCommon + `plant "$PWD/evil-common" "$MARKS"
attempt commondir-link sh -c 'rm -f .git/commondir; ln -s ../evil-common .git/commondir'
attempt commondir-rm sh -c 'rm .git/commondir && ! test -e .git/commondir'
attempt commondir-rename sh -c 'printf "%s\n" "$PWD/evil-common" > cd.tmp && mv -f cd.tmp .git/commondir'
` + commondirWrite

// commondirWrite is the attack as the issue found it: a plain write.
const commondirWrite = `attempt commondir-write sh -c 'printf "%s\n" "$PWD/evil-common" > .git/commondir'
`

// userGit is the user's own git, unconfined, after the run: status, an alias and a commit
// in dir (git's own errors are ignored: the markers tell what ran).
func userGit(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{{"status"}, {"st"}, {"commit", "-q", "--allow-empty", "-m", "user"}} {
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), gitTestEnv...)
		_ = c.Run()
	}
}

func requireNoMarks(t *testing.T, marks string) {
	t.Helper()
	for _, m := range []string{"fsmonitor-ran", "alias-ran", "hook-ran"} {
		assert.NoFileExists(t, filepath.Join(marks, m), "the user's git ran what a confined command planted")
	}
}

// TestGitCommondirAttackControl is the positive control of TestViewGitCommondir: run
// unconfined, the attack makes the user's next git status, alias and commit run the
// planted fsmonitor, alias and pre-commit hook.
func TestGitCommondirAttackControl(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	gitCmd(t, root, "commit", "-q", "--allow-empty", "-m", "init")
	marks := t.TempDir()
	c := exec.Command("/bin/sh", "-c", attemptScript+plantEvilCommon+`plant "$PWD/evil-common" "$MARKS"
`+commondirWrite)
	c.Dir = root
	c.Env = append(os.Environ(), "MARKS="+marks)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "commondir-write DONE")
	userGit(t, root)
	for _, m := range []string{"fsmonitor-ran", "alias-ran", "hook-ran"} {
		assert.FileExists(t, filepath.Join(marks, m), "unconfined, the planted common directory runs")
	}
}

// TestViewGitCommondir: a confined command cannot point the main repository's git
// directory at another common directory (write, rename over, remove, symlink the
// commondir fledge makes), and the user's git afterwards runs none of what it planted.
func TestViewGitCommondir(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			root := t.TempDir()
			gitCmd(t, root, "init", "-q", root)
			gitCmd(t, root, "commit", "-q", "--allow-empty", "-m", "init")
			marks := t.TempDir()
			spec := gitAttackSpec(t, attemptScript+commondirAttack, root, root)
			spec.Env = append(spec.Env, "MARKS="+marks)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			requireRefused(t, out, "commondir-write", "commondir-rename", "commondir-rm", "commondir-link")
			b, err := os.ReadFile(filepath.Join(root, ".git", "commondir"))
			require.NoError(t, err)
			assert.Equal(t, ".\n", string(b), "fledge's commondir, unchanged")
			userGit(t, root)
			requireNoMarks(t, marks)
			assert.Equal(t, "user\n", gitCmd(t, root, "log", "-1", "--format=%s"), "the user's git works")
		})
	}
}

// TestViewGitAllowList attacks every other entry of the git directories of a repository
// with a submodule (and a nested one) and a linked worktree, from a confined command with
// the whole tree writable: what git does not write in ordinary work is read-only, existing
// or made by fledge, so none of it can be written, replaced or removed, and no submodule
// git directory can be planted. The user's git afterwards runs nothing.
func TestViewGitAllowList(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) { testGitAllowList(t, l.opts) })
	}
}

func testGitAllowList(t *testing.T, opts Options) {
	sb := newSandbox(t, opts)
	requireView(t, sb)
	l := newGitLayout(t)
	gd := filepath.Join(l.main, ".git")
	// Missing before the run: hooks (fledge makes it); present and unknown to fledge: a
	// file of some tool; made by the user: info/attributes.
	require.NoError(t, os.RemoveAll(filepath.Join(gd, "hooks")))
	require.NoError(t, os.WriteFile(filepath.Join(gd, "sometool"), []byte("x"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(gd, "info"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gd, "info", "attributes"), nil, 0o644))
	marks := t.TempDir()
	evilCfg := `printf '[core]\n\tfsmonitor = touch $MARKS/fsmonitor-ran\n'`
	evilHook := `printf '#!/bin/sh\ntouch $MARKS/hook-ran\n'`
	script := attemptScript + plantEvilCommon + `plant "$PWD/evil-common" "$MARKS"
gd=.git; wt=.git/worktrees/wt
attempt config-worktree sh -c "` + evilCfg + ` > $gd/config.worktree"
attempt hooks-made sh -c "` + evilHook + ` > $gd/hooks/pre-commit"
attempt hooks-replaced sh -c "mv $gd/hooks $gd/hooks-aside || rm -rf $gd/hooks; mkdir -p $gd/hooks && ` + evilHook + ` > $gd/hooks/pre-commit"
attempt info-attributes sh -c 'echo "* filter=evil" > .git/info/attributes'
attempt info-new sh -c 'echo "* filter=evil" > .git/info/new'
attempt description sh -c 'echo evil > .git/description'
attempt unknown sh -c 'echo evil > .git/sometool'
attempt unknown-rm rm -f .git/sometool
attempt modules-new sh -c "mkdir -p $gd/modules/evil/hooks && ` + evilHook + ` > $gd/modules/evil/hooks/post-checkout"
attempt module-aside mv .git/modules/sub .git/modules/sub-aside
attempt modules-aside mv .git/modules .git/modules-aside
attempt module-config sh -c "` + evilCfg + ` >> $gd/modules/sub/config"
attempt module-hook sh -c "` + evilHook + ` > $gd/modules/sub/hooks/pre-commit"
attempt module-commondir sh -c 'echo "$PWD/evil-common" > .git/modules/sub/commondir'
attempt module-info sh -c 'echo x > .git/modules/sub/info/exclude'
attempt deep-config sh -c "` + evilCfg + ` >> $gd/modules/sub/modules/deep/config"
attempt deep-modules-new mkdir .git/modules/sub/modules/deep/modules/evil
attempt wt-config-worktree sh -c "` + evilCfg + ` > $wt/config.worktree"
attempt wt-commondir sh -c 'echo "$PWD/evil-common" > .git/worktrees/wt/commondir'
attempt wt-gitdir sh -c 'echo "$PWD/evil-wt/.git" > .git/worktrees/wt/gitdir'
attempt wt-modules-new mkdir .git/worktrees/wt/modules/evil
attempt wt-aside mv .git/worktrees/wt .git/worktrees/wt-aside
attempt dotgit-file sh -c 'mv .git .git-aside && echo "gitdir: evil-common" > .git'
attempt dotgit-dir sh -c 'mv .git .git-aside && mv evil-common .git'
attempt sub-dotgit sh -c 'echo "gitdir: ../evil-common" > sub/.git'
cd sub && git status --porcelain >/dev/null && echo sub-status-ok && git commit -q --allow-empty -m "in the submodule" && echo sub-commit-ok`
	spec := gitAttackSpec(t, script, l.main, l.parent)
	spec.Env = append(spec.Env, "MARKS="+marks)
	// The placeholders are fledge's, made as the launch does, before the snapshot.
	_, err := defaultGitProtection([]string{l.parent}, nil)
	require.NoError(t, err)
	before := snapshot(t, filepath.Join(gd, "modules"), filepath.Join(gd, "worktrees"), filepath.Join(gd, "info"))
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	requireRefused(t, out, "config-worktree", "hooks-made", "hooks-replaced", "info-attributes", "info-new",
		"description", "unknown", "unknown-rm", "modules-new", "module-aside", "modules-aside", "module-config",
		"module-hook", "module-commondir", "module-info", "deep-config", "deep-modules-new", "wt-config-worktree",
		"wt-commondir", "wt-gitdir", "wt-modules-new", "wt-aside", "dotgit-file", "dotgit-dir", "sub-dotgit")
	assert.Contains(t, out, "sub-status-ok\nsub-commit-ok\n", "git works in the submodule (its git directory is writable again): %s", errOut)

	after := snapshot(t, filepath.Join(gd, "modules"), filepath.Join(gd, "worktrees"), filepath.Join(gd, "info"))
	for p, was := range before {
		if !sandbox.GitWrites(filepath.Base(p)) && !strings.Contains(p, "/objects/") && !strings.Contains(p, "/refs/") && !strings.Contains(p, "/logs/") {
			assert.Equal(t, was, after[p], "%s unchanged on disk", p)
		}
	}
	for p := range after {
		rel, _ := filepath.Rel(gd, p)
		top := strings.Split(rel, "/")
		if _, ok := before[p]; !ok && !sandbox.GitWrites(top[len(top)-1]) && !strings.Contains(p, "/objects/") && !strings.Contains(p, "/refs/") && !strings.Contains(p, "/logs/") {
			t.Errorf("%s made by the confined command", p)
		}
	}
	assert.DirExists(t, filepath.Join(gd, "hooks"))
	assert.NoFileExists(t, filepath.Join(gd, "hooks", "pre-commit"))
	assert.NoDirExists(t, filepath.Join(gd, "hooks-aside"))
	b, err := os.ReadFile(filepath.Join(gd, "sometool"))
	require.NoError(t, err)
	assert.Equal(t, "x", string(b))
	assert.DirExists(t, gd)
	assert.NoDirExists(t, filepath.Join(l.main, ".git-aside"))
	for _, d := range []string{l.main, filepath.Join(l.main, "sub"), filepath.Join(l.main, "sub", "deep"), l.wt} {
		userGit(t, d)
	}
	requireNoMarks(t, marks)
	assert.Equal(t, "in the submodule\n", gitCmd(t, filepath.Join(l.main, "sub"), "log", "-1", "--format=%s", "HEAD~1"), "the confined commit in the submodule is on disk")
}

// TestViewGitWorksUnderAllowList: under the protection, a confined command does the git
// work of an ordinary session in a repository with a submodule and a linked worktree:
// commit, fetch from a local remote, a true merge, stash, rebase, worktree add and a
// commit in the new worktree. The host's git then finds it all on disk.
func TestViewGitWorksUnderAllowList(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) { testGitWorks(t, l.opts) })
	}
}

func testGitWorks(t *testing.T, opts Options) {
	sb := newSandbox(t, opts)
	requireView(t, sb)
	l := newGitLayout(t)
	// The remote: a bare repository outside every root (read-only to the command), one
	// commit ahead on a branch "feature".
	remotes := t.TempDir()
	origin := filepath.Join(remotes, "origin.git")
	gitCmd(t, remotes, "init", "-q", "--bare", origin)
	gitCmd(t, l.main, "push", "-q", origin, "main")
	other := filepath.Join(remotes, "other")
	gitCmd(t, remotes, "clone", "-q", origin, other)
	gitCmd(t, other, "checkout", "-q", "-b", "feature")
	require.NoError(t, os.WriteFile(filepath.Join(other, "feature"), []byte("f\n"), 0o644))
	gitCmd(t, other, "add", "feature")
	gitCmd(t, other, "commit", "-q", "-m", "feature")
	gitCmd(t, other, "push", "-q", "origin", "feature")
	gitCmd(t, l.main, "remote", "add", "origin", origin)
	wt2 := filepath.Join(l.parent, "wt2")

	script := `set -e
echo one > one && git add one && git commit -q -m one
git fetch -q origin
git merge -q --no-edit origin/feature
echo dirty >> one && git stash -q
git checkout -q -b topic HEAD~1
echo t > t && git add t && git commit -q -m topic
git rebase -q main
git checkout -q main
git worktree add -q ` + wt2 + ` -b wt2
cd ` + wt2 + ` && echo w > w && git add w && git commit -q -m in-wt2
echo all-done`
	spec := gitAttackSpec(t, script, l.main, l.parent)
	spec.Access.ReadOnly = append(spec.Access.ReadOnly, remotes)
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Equal(t, "all-done\n", out, "stderr:\n%s", errOut)

	log := gitCmd(t, l.main, "log", "--format=%s", "main")
	assert.True(t, strings.HasPrefix(log, "Merge remote-tracking branch 'origin/feature'\none\nfeature\n") ||
		strings.HasPrefix(log, "Merge remote-tracking branch 'origin/feature'\nfeature\none\n"), "merge commit on main: %s", log)
	assert.NotEmpty(t, gitCmd(t, l.main, "rev-parse", "refs/remotes/origin/feature"), "fetched")
	assert.FileExists(t, filepath.Join(l.main, ".git", "FETCH_HEAD"))
	stash := gitCmd(t, l.main, "stash", "list", "--format=%gs")
	assert.True(t, strings.HasPrefix(stash, "WIP on main:") && strings.Count(stash, "\n") == 1, "one stash: %q", stash)
	assert.Equal(t, "one\n", readFile(t, filepath.Join(l.main, "one")), "the stash took the change")
	assert.Equal(t, "topic\nMerge remote-tracking branch 'origin/feature'\n",
		strings.Join(strings.SplitAfter(gitCmd(t, l.main, "log", "--format=%s", "-2", "topic"), "\n")[:2], ""), "topic rebased onto main")
	assert.Contains(t, gitCmd(t, l.main, "worktree", "list"), wt2)
	assert.Equal(t, "in-wt2\n", gitCmd(t, wt2, "log", "-1", "--format=%s"))
	assert.Equal(t, "", gitCmd(t, l.main, "status", "--porcelain", "--untracked-files=no"), "main is clean")
	gitCmd(t, l.main, "fsck", "--no-progress")
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// TestViewGitCwdInReadOnlyDir: a command whose working directory lies inside a read-only
// entry of a git directory (below its mount point, which a view template copy mounts the
// working directory over) or is modules/ itself cannot write there, while one in a
// submodule's git directory (writable again) can.
func TestViewGitCwdInReadOnlyDir(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			lay := newGitLayout(t)
			gd := filepath.Join(lay.main, ".git")
			require.NoError(t, os.MkdirAll(filepath.Join(gd, "sometool", "sub"), 0o755))
			for _, tc := range []struct{ dir, script, want string }{
				{"sometool/sub", `attempt write sh -c 'echo x > f'`, "write refused\n"},
				{"modules", `attempt modules-new mkdir -p evil/hooks`, "modules-new refused\n"},
				{"modules/sub", `attempt hook sh -c 'echo x > hooks/pre-commit'
attempt lock sh -c 'echo x > probe.lock && rm probe.lock'`, "hook refused\nlock DONE\n"},
			} {
				t.Run(tc.dir, func(t *testing.T) {
					spec := gitAttackSpec(t, attemptScript+tc.script, filepath.Join(gd, tc.dir), lay.parent)
					res, out, errOut := run(t, sb, spec)
					require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
					assert.Equal(t, tc.want, out)
				})
			}
			assert.NoFileExists(t, filepath.Join(gd, "sometool", "sub", "f"))
			assert.NoDirExists(t, filepath.Join(gd, "modules", "evil"))
			assert.NoFileExists(t, filepath.Join(gd, "modules", "sub", "hooks", "pre-commit"))
		})
	}
}

// The placeholders are made where missing (hooks, config.worktree, modules, a commondir
// of "." that git reads as none), in a bare repository too, and not when opted out; git
// keeps working with them.
func TestDefaultProtectedPlaceholders(t *testing.T) {
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	gitCmd(t, root, "commit", "-q", "--allow-empty", "-m", "init")
	bare := filepath.Join(root, "origin.git")
	gitCmd(t, root, "init", "-q", "--bare", bare)
	gd := filepath.Join(root, ".git")
	require.NoError(t, os.RemoveAll(filepath.Join(gd, "hooks")))

	got, err := defaultGitProtection([]string{root}, []string{".git/commondir", ".git/modules"})
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(gd, "commondir"), "opted out: not made")
	assert.NoDirExists(t, filepath.Join(gd, "modules"))
	assert.NotContains(t, got.Protected, filepath.Join(gd, "commondir"))
	assert.DirExists(t, filepath.Join(gd, "hooks"))

	got, err = defaultGitProtection([]string{root}, nil)
	require.NoError(t, err)
	for _, d := range []string{gd, bare} {
		assert.Equal(t, ".\n", readFile(t, filepath.Join(d, "commondir")))
		assert.DirExists(t, filepath.Join(d, "modules"))
		assert.FileExists(t, filepath.Join(d, "config.worktree"))
		for _, n := range []string{"commondir", "modules", "hooks", "config", "config.worktree"} {
			assert.Contains(t, got.Protected, filepath.Join(d, n))
		}
	}
	gitCmd(t, root, "commit", "-q", "--allow-empty", "-m", "after")
	gitCmd(t, root, "push", "-q", bare, "HEAD:main")
	assert.Equal(t, "after\n", gitCmd(t, bare, "log", "-1", "--format=%s", "main"))
	assert.Equal(t, "", gitCmd(t, root, "status", "--porcelain", "--untracked-files=no"))
}
