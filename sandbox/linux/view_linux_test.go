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

	"github.com/fledgehq/fledge/testkit/testutil"
)

// viewLaunchers build views every way there is: the thread launcher from a session's
// template and afresh, and the stub.
var viewLaunchers = []struct {
	name string
	opts Options
}{
	{"thread", Options{Launch: LaunchThread}},
	{"thread-fresh", Options{Launch: LaunchThread, DisableViewTemplate: true}},
	{"stub", Options{Launch: LaunchStub}},
}

func requireView(t *testing.T, sb *Sandbox) {
	t.Helper()
	testutil.SkipUnlessSupported(t, sb.view, "no private filesystem view (needs root)")
}

// TestViewHidesEverythingElse attacks what Landlock cannot stop: metadata changes outside
// the sandbox. chmod 606 and touch -d on a key under $HOME and on a directory outside every
// root must leave the files on disk unchanged, and the command must see that they do not
// exist (so `test -e` and `[ -d ~/.ssh ]` tell the truth).
func TestViewHidesEverythingElse(t *testing.T) {
	_, err := os.Stat("/bin/bash")
	testutil.SkipUnlessSupported(t, err == nil, "needs /bin/bash for process substitution")
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			key := filepath.Join(e.home, ".ssh", "id_rsa")
			before := map[string]os.FileInfo{}
			for _, p := range []string{key, e.outside} {
				st, err := os.Stat(p)
				require.NoError(t, err)
				before[p] = st
			}
			script := `for p in "$1" "$2"; do
  chmod 606 "$p" 2>/dev/null && echo "CHMOD-OK $p"
  touch -d 2001-01-01 "$p" 2>/dev/null && echo "TOUCH-OK $p"
  test -e "$p" && echo "EXISTS $p"
done
[ -d "$HOME/.ssh" ] && echo "SSH-DIR"
test -e "$HOME" && echo HOME-EXISTS
test -w /etc/passwd && echo ETC-WRITABLE
touch /tmp/x 2>/dev/null && echo TMP-WRITABLE
touch "$TMPDIR/x" && echo PRIVATE-TMP-OK
read -r line < /dev/stdin; echo "stdin: $line"
echo fd > /dev/stdout
bash -c 'cat <(echo procsub)' 
echo project > ./written && cat ./written`
			spec := e.spec(script, "sh", key, e.outside)
			spec.Stdin = strings.NewReader("from the host\n")
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			// $HOME exists only as the path to the project; nothing else of it does.
			// /dev/stdin and /dev/stdout work (bash's <(...) needs /dev/fd too).
			assert.Equal(t, "HOME-EXISTS\nPRIVATE-TMP-OK\nstdin: from the host\nfd\nprocsub\nproject\n", out)
			for p, st := range before {
				now, err := os.Stat(p)
				require.NoError(t, err)
				assert.Equal(t, st.Mode(), now.Mode(), "mode of %s changed on disk", p)
				assert.Equal(t, st.ModTime(), now.ModTime(), "mtime of %s changed on disk", p)
			}
			b, err := os.ReadFile(filepath.Join(e.project, "written"))
			require.NoError(t, err)
			assert.Equal(t, "project\n", string(b), "the project is the real one, writable")
		})
	}
}

// TestViewProtectsGitMetadata attacks persistence through the project: with the project
// writable, planting a hook, editing .git/config, removing the hooks directory or moving
// .git aside (to put a fresh one with hooks in its place) all fail, and the files on disk
// are unchanged, while git commit in the project still works.
func TestViewProtectsGitMetadata(t *testing.T) {
	git, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			gitEnv := []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid"}
			initCmd := exec.Command(git, "init", "-q", e.project)
			initCmd.Env = append(os.Environ(), gitEnv...)
			require.NoError(t, initCmd.Run())
			config := filepath.Join(e.project, ".git", "config")
			cfgBefore, err := os.ReadFile(config)
			require.NoError(t, err)

			script := `attempt() { name=$1; shift; if "$@" 2>/dev/null; then echo "$name DONE"; else echo "$name refused"; fi; }
attempt hook sh -c 'printf "#!/bin/sh\necho pwned\n" > .git/hooks/post-checkout'
attempt chmod-hook chmod +x .git/hooks/post-checkout
attempt config sh -c 'printf "[core]\n\tfsmonitor = ./evil\n" >> .git/config'
attempt git-config git config alias.st '!./evil'
attempt rm-hooks rm -rf .git/hooks
attempt mv-git mv .git .git-aside
attempt rm-config rm -f .git/config
echo hi > file && git add file && git commit -q -m "from the sandbox" && git log --format=%s`
			spec := e.spec(script)
			spec.Env = append(spec.Env, gitEnv...)
			spec.Limits.Timeout = time.Minute
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, name := range []string{"hook", "chmod-hook", "config", "git-config", "rm-hooks", "mv-git", "rm-config"} {
				assert.Contains(t, out, name+" refused\n", "%s from an exec", name)
			}
			assert.True(t, strings.HasSuffix(out, "from the sandbox\n"), "git commit works: %s", out)

			assert.NoFileExists(t, filepath.Join(e.project, ".git", "hooks", "post-checkout"))
			assert.DirExists(t, filepath.Join(e.project, ".git", "hooks"))
			assert.NoDirExists(t, filepath.Join(e.project, ".git-aside"))
			cfgAfter, err := os.ReadFile(config)
			require.NoError(t, err)
			assert.Equal(t, string(cfgBefore), string(cfgAfter), ".git/config unchanged on disk")
		})
	}
}
