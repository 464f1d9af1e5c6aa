// SPDX-License-Identifier: MIT

package fledgev1

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestAttackExecNestedGitRepo is the nested-repository attack from a real plugin's
// exec: a new repository in the project with a planted core.fsmonitor, recorded as a
// submodule in the project's index. When the command ends fledge moves its .git aside,
// writes a git_repo_quarantined deny record, says so on stderr, and the user's git status
// at the top of the project runs nothing.
func TestAttackExecNestedGitRepo(t *testing.T) {
	git, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	f := newFixture(t, "attack_exec.py", execGrant)
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	hostGit := func(args ...string) {
		c := exec.Command(git, args...)
		c.Dir, c.Env = f.project, env
		_ = c.Run()
	}
	hostGit("init", "-q", f.project)
	marks := t.TempDir()
	marker := filepath.Join(marks, "fsmonitor-ran")
	attack := "git init -q sub && printf '[core]\\n\\tfsmonitor = touch " + marker + "\\n' >> sub/.git/config && " +
		"git update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,sub && echo armed"
	_, rep := f.runScript(execSteps([]attackExec{{"arm", attack}}, 0)...)
	v := f.execValue(rep, "arm")
	require.EqualValues(t, 0, v["code"], "the command runs (the index is writable): %v", v)
	require.Equal(t, "armed\n", v["stdout"])
	f.assertAlive(rep)

	hostGit("status")
	assert.NoFileExists(t, marker, "the user's git status ran the planted fsmonitor")
	sub := filepath.Join(f.project, "sub")
	assert.NoDirExists(t, filepath.Join(sub, ".git"))
	moved, err := filepath.Glob(filepath.Join(sub, ".git.fledge-quarantine-*"))
	require.NoError(t, err)
	require.Len(t, moved, 1)

	recs := f.findRecords(audit.EventGitQuarantine)
	require.Len(t, recs, 1)
	assert.Equal(t, audit.Deny, recs[0].Decision)
	assert.Equal(t, string(reason.PathEscape), recs[0].Reason)
	assert.Equal(t, filepath.Join(sub, ".git"), recs[0].Details["path"])
	assert.Equal(t, moved[0], recs[0].Details["moved_to"])
	assert.EqualValues(t, 1, num(f.outcomeFor(attack).Details["git_quarantined"]))
	assert.True(t, strings.Contains(f.stderr.String(), moved[0]), "the user is told where it went: %s", f.stderr.String())
	vr, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.True(t, vr.OK)
}
