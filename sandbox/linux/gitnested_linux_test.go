// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// armNested is shell that makes $1 a new git repository whose config runs
// $MARKS/fsmonitor-ran as core.fsmonitor (git runs it from any git status there).
const armNested = `arm() {
  mkdir -p "$1" && git init -q "$1" &&
  printf '[core]\n\tfsmonitor = "touch %s/fsmonitor-ran; false"\n' "$MARKS" >> "$1/.git/config"
}
`

// gitlinkIt records $1 as a gitlink (a submodule entry) in the index of the repository
// in the working directory, as git add of a nested repository does.
const gitlinkIt = `gitlink() { git update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,"$1"; }
`

// nestedAttack is the attack on the repository in the working directory: a
// new nested repository with a planted fsmonitor, recorded as a submodule in the index,
// next to the top and deep down.
const nestedAttack = armNested + gitlinkIt + `arm sub && gitlink sub && arm a/b/deep && gitlink a/b/deep && echo armed
`

func newRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	gitCmd(t, root, "init", "-q", root)
	gitCmd(t, root, "commit", "-q", "--allow-empty", "-m", "init")
	return root
}

// userStatus is the user's own git status at the top of the repository, unconfined.
func userStatus(t *testing.T, dir string) {
	t.Helper()
	c := exec.Command("git", "status")
	c.Dir = dir
	c.Env = append(os.Environ(), gitTestEnv...)
	_ = c.Run()
}

// TestGitNestedAttackControl is the positive control of TestViewGitNestedQuarantined:
// unconfined, the user's plain git status at the top of the repository recurses into the
// new nested repositories and runs their fsmonitor.
func TestGitNestedAttackControl(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	root := newRepo(t)
	marks := t.TempDir()
	c := exec.Command("/bin/sh", "-c", nestedAttack)
	c.Dir = root
	c.Env = append(os.Environ(), append(gitTestEnv, "MARKS="+marks)...)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	userStatus(t, root)
	assert.FileExists(t, filepath.Join(marks, "fsmonitor-ran"), "unconfined, git status runs the nested repository's fsmonitor")
}

// quarantined is the one .git.fledge-quarantine-* beside dir/.git.
func quarantined(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".git"+quarantineSuffix+"*"))
	require.NoError(t, err)
	require.Len(t, m, 1, "one quarantined .git in %s", dir)
	return m[0]
}

// TestViewGitNestedQuarantined: a confined command makes new nested repositories with a
// planted core.fsmonitor and records them as gitlinks in the index (which it must be able
// to write). When the run ends their .git is moved aside, the Result says so, and the
// user's git status afterwards runs nothing; what the command made is kept, renamed.
func TestViewGitNestedQuarantined(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			root := newRepo(t)
			marks := t.TempDir()
			spec := gitAttackSpec(t, nestedAttack, root, root)
			spec.Env = append(spec.Env, "MARKS="+marks)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Equal(t, "armed\n", out, "the attack itself is not stopped (the index is writable): %s", errOut)
			userStatus(t, root)
			requireNoMarks(t, marks)
			require.Len(t, res.Quarantined, 2, "%+v", res.Quarantined)
			for i, sub := range []string{"a/b/deep", "sub"} { // index order
				dir := filepath.Join(root, sub)
				assert.NoFileExists(t, filepath.Join(dir, ".git"))
				assert.NoDirExists(t, filepath.Join(dir, ".git"))
				q := quarantined(t, dir)
				assert.Contains(t, readFile(t, filepath.Join(q, "config")), "fsmonitor", "kept, renamed")
				got := res.Quarantined[i]
				assert.Equal(t, filepath.Join(dir, ".git"), got.Path)
				assert.Equal(t, q, got.MovedTo)
				assert.Equal(t, root, got.Repository)
				assert.Empty(t, got.Err)
			}
			assert.Contains(t, gitCmd(t, root, "ls-files", "--stage"), "160000 ", "the index is the command's: only the repositories went")
		})
	}
}

// TestViewGitNestedHandOff: the repository is armed by one run and recorded as a gitlink
// by a later one (whose launch finds the .git existing, and protects it), or a run arms
// the .git of a gitlink an earlier run recorded with no .git (an uninitialised submodule):
// either way the .git was not there when this Sandbox first read the index, and the run
// that ends with it recorded moves it aside.
func TestViewGitNestedHandOff(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			root := newRepo(t)
			marks := t.TempDir()
			step := func(script string) int {
				spec := gitAttackSpec(t, armNested+gitlinkIt+script, root, root)
				spec.Env = append(spec.Env, "MARKS="+marks)
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
				return len(res.Quarantined)
			}
			assert.Equal(t, 0, step("arm sub && arm x/y/deep"), "no gitlink yet")
			assert.Equal(t, 2, step("gitlink sub && gitlink x/y/deep"))
			assert.Equal(t, 0, step("gitlink later"), "a gitlink with no .git")
			assert.Equal(t, 1, step("arm later"))
			for _, d := range []string{"sub", "x/y/deep", "later"} {
				quarantined(t, filepath.Join(root, d))
			}
			userStatus(t, root)
			requireNoMarks(t, marks)
		})
	}
}

// TestViewGitNestedExisting: repositories that were there before fledge first read the
// index keep working and are not moved: a submodule (absorbed under .git/modules), and an
// old-style nested repository (its own .git directory, recorded as a gitlink) several
// directories down, whose config and hooks a confined command cannot write.
func TestViewGitNestedExisting(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			lay := newGitLayout(t)
			old := filepath.Join(lay.main, "vendor", "pkg", "old")
			require.NoError(t, os.MkdirAll(old, 0o755))
			gitCmd(t, old, "init", "-q", old)
			gitCmd(t, old, "commit", "-q", "--allow-empty", "-m", "old")
			gitCmd(t, lay.main, "add", "vendor/pkg/old")
			gitCmd(t, lay.main, "commit", "-q", "-m", "old-style nested repository")
			require.Contains(t, gitCmd(t, lay.main, "ls-files", "--stage", "vendor/pkg/old"), "160000 ")
			marks := t.TempDir()
			evilCfg := `printf '[core]\n\tfsmonitor = touch $MARKS/fsmonitor-ran\n'`
			script := attemptScript + `o=vendor/pkg/old/.git
attempt old-config sh -c "` + evilCfg + ` >> $o/config"
attempt old-hook sh -c 'printf "#!/bin/sh\ntouch $MARKS/hook-ran\n" > vendor/pkg/old/.git/hooks/pre-commit'
attempt old-aside sh -c 'mv vendor/pkg/old/.git vendor/pkg/old/.git-aside'
attempt old-parent-aside sh -c 'mv vendor/pkg vendor/pkg-aside'
cd vendor/pkg/old && git commit -q --allow-empty -m "in old" && echo old-commit-ok
cd ../../../sub && git status --porcelain >/dev/null && git commit -q --allow-empty -m "in sub" && echo sub-commit-ok`
			spec := gitAttackSpec(t, script, lay.main, lay.parent)
			spec.Env = append(spec.Env, "MARKS="+marks)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			requireRefused(t, out, "old-config", "old-hook", "old-aside", "old-parent-aside")
			assert.Contains(t, out, "old-commit-ok\nsub-commit-ok\n", "git works in both: %s", errOut)
			assert.Empty(t, res.Quarantined, "nothing that existed before is moved")
			assert.DirExists(t, filepath.Join(old, ".git"))
			assert.NotContains(t, readFile(t, filepath.Join(old, ".git", "config")), "fsmonitor")
			for _, d := range []string{lay.main, old, filepath.Join(lay.main, "sub")} {
				userGit(t, d)
			}
			requireNoMarks(t, marks)
			assert.Equal(t, "in sub\n", gitCmd(t, filepath.Join(lay.main, "sub"), "log", "-1", "--format=%s", "HEAD~1"))
			assert.Equal(t, "in old\n", gitCmd(t, old, "log", "-1", "--format=%s", "HEAD~1"))
		})
	}
}

// TestViewGitNestedBadIndex: an index the command leaves unreadable to fledge (garbage, or
// a FIFO fledge must not block on) is moved aside itself, so git sees an empty index and
// recurses into nothing; an index fledge cannot read at launch refuses the launch.
func TestViewGitNestedBadIndex(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	// A clean index outside the project: fledge following .git/index there would read a
	// valid index with no gitlink and leave the link in place (git follows it too).
	outside := t.TempDir()
	clean := newRepo(t)
	b, err := os.ReadFile(filepath.Join(clean, ".git", "index"))
	if err != nil { // a fresh repository has no index yet: make one
		gitCmd(t, clean, "update-index", "--add", "--cacheinfo", "100644,e69de29bb2d1d6434b8b29ae775ad8c2e48c5391,f")
		b, err = os.ReadFile(filepath.Join(clean, ".git", "index"))
	}
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(outside, "index"), b, 0o644))
	for _, tc := range []struct{ name, script string }{
		{"garbage", `printf 'DIRC\0\0\0\2\0\0\0\7garbage' > .git/index`},
		{"fifo", `rm .git/index && mkfifo .git/index`},
		{"symlink", `rm .git/index && ln -s ` + filepath.Join(outside, "index") + ` .git/index`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRepo(t)
			gitCmd(t, root, "update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,sub")
			res, out, errOut := run(t, sb, gitAttackSpec(t, tc.script, root, root))
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Len(t, res.Quarantined, 1, "%+v", res.Quarantined)
			assert.Equal(t, filepath.Join(root, ".git", "index"), res.Quarantined[0].Path)
			assert.True(t, strings.HasPrefix(filepath.Base(res.Quarantined[0].MovedTo), "index"+quarantineSuffix))
			_, err := os.Lstat(filepath.Join(root, ".git", "index"))
			assert.True(t, os.IsNotExist(err), "no index left")
			got, err := os.ReadFile(filepath.Join(outside, "index"))
			require.NoError(t, err)
			assert.Equal(t, b, got, "the link's target is neither moved nor changed")
		})
	}
	root := newRepo(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, ".git", "index"), []byte("DIRC\x00\x00\x00\x09"), 0o644))
	_, err = sb.Start(t.Context(), gitAttackSpec(t, "true", root, root))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "index")
}

// TestViewGitNestedSplitIndex: the gitlink is hidden in a split index (the command turns
// it on itself: sharedindex.* is a name git writes): as a new entry of the index, or as
// one replacing a shared entry of the same path (recorded without its path).
func TestViewGitNestedSplitIndex(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	for _, tc := range []struct{ name, script string }{
		{"new-entry", `git update-index --split-index && arm sub && gitlink sub && echo armed`},
		{"replaced-entry", `echo x > sub && echo y > other && git add sub other && git update-index --split-index &&
rm sub && arm sub && gitlink sub && echo armed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRepo(t)
			marks := t.TempDir()
			spec := gitAttackSpec(t, armNested+gitlinkIt+tc.script, root, root)
			spec.Env = append(spec.Env, "MARKS="+marks)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Equal(t, "armed\n", out, errOut)
			m, _ := filepath.Glob(filepath.Join(root, ".git", "sharedindex.*"))
			require.NotEmpty(t, m, "a split index")
			userStatus(t, root)
			requireNoMarks(t, marks)
			require.Len(t, res.Quarantined, 1, "%+v", res.Quarantined)
			quarantined(t, filepath.Join(root, "sub"))
		})
	}
}

// TestViewGitNestedConcurrentHandOff: two runs at once hand an armed repository to each
// other: Y records the gitlink, Z is launched while it is there (and finds the .git
// existing), Y takes the gitlink away before it ends, Z records it again. The baseline
// taken before Y ran still holds at Z's end, so Z's end moves it aside. A repository the
// user records while no run is active is theirs: the next run leaves it.
func TestViewGitNestedConcurrentHandOff(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	root := newRepo(t)
	marks := t.TempDir()
	spec := func(script string) *sandbox.Spec {
		s := gitAttackSpec(t, armNested+gitlinkIt+`waitfor() { i=0; while [ ! -e "$1" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; }
`+script, root, root)
		s.Env = append(s.Env, "MARKS="+marks)
		return s
	}
	res, out, errOut := run(t, sb, spec("arm sub"))
	require.Equal(t, 0, res.ExitCode, "%s %s", out, errOut)
	require.Empty(t, res.Quarantined)

	y, err := sb.Start(t.Context(), spec("gitlink sub && touch y-linked && waitfor go-y && git update-index --force-remove sub && echo y-done"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(root, "y-linked")); return err == nil }, 20*time.Second, 20*time.Millisecond)
	z, err := sb.Start(t.Context(), spec("waitfor go-z && gitlink sub && echo z-done"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "go-y"), nil, 0o644))
	yr := waitFor(t, y)
	assert.Empty(t, yr.Quarantined, "no gitlink when Y ends")
	require.NoError(t, os.WriteFile(filepath.Join(root, "go-z"), nil, 0o644))
	zr := waitFor(t, z)
	require.Len(t, zr.Quarantined, 1, "%+v", zr.Quarantined)
	quarantined(t, filepath.Join(root, "sub"))
	userStatus(t, root)
	requireNoMarks(t, marks)

	// The user's own nested repository, recorded between runs, stays.
	mine := filepath.Join(root, "mine")
	gitCmd(t, root, "init", "-q", mine)
	gitCmd(t, mine, "commit", "-q", "--allow-empty", "-m", "mine")
	gitCmd(t, root, "add", "mine")
	res, out, errOut = run(t, sb, spec("true"))
	require.Equal(t, 0, res.ExitCode, "%s %s", out, errOut)
	assert.Empty(t, res.Quarantined)
	assert.DirExists(t, filepath.Join(mine, ".git"))
}

// TestGitProtectFIFOCannotHangLaunch: the protector reads git files in writable roots at
// every launch (a repository's config, a .git file, commondir). A command that leaves a
// repository whose config is a FIFO must not make the next launch block in open(2) forever
// (no writer ever comes): the read is non-blocking and takes regular files only.
func TestGitProtectFIFOCannotHangLaunch(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	root := newRepo(t)
	for _, script := range []string{
		`mkdir -p x/.git/objects x/.git/refs && echo 'ref: refs/heads/main' > x/.git/HEAD && mkfifo x/.git/config`,
		`mkdir y && mkfifo y/.git`,
	} {
		res, out, errOut := run(t, sb, gitAttackSpec(t, script, root, root))
		require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, out, errOut := run(t, sb, gitAttackSpec(t, "echo launched", root, root))
		assert.Equal(t, 0, res.ExitCode, errOut)
		assert.Equal(t, "launched\n", out)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the launch after a FIFO config was planted did not return in 30 s (fledge blocked opening it)")
	}
}
