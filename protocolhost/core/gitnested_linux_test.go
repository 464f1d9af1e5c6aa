// SPDX-License-Identifier: MIT

package core

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestSpawnNestedGitRepoQuarantined: a plugin process itself (not a command it runs) makes
// a nested repository with a planted fsmonitor in its writable project and records it as
// a gitlink. When it ends, the .git is moved aside, a git_repo_quarantined deny record
// precedes plugin_exit (which counts it), the user is warned, and the user's git status
// runs nothing.
func TestSpawnNestedGitRepoQuarantined(t *testing.T) {
	git, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	proj := t.TempDir()
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	hostGit := func(args ...string) {
		c := exec.Command(git, args...)
		c.Dir, c.Env = proj, env
		_ = c.Run()
	}
	hostGit("init", "-q", proj)
	marker := filepath.Join(t.TempDir(), "fsmonitor-ran")
	script := "git init -q sub && printf '[core]\\n\\tfsmonitor = touch " + marker + "\\n' >> sub/.git/config && " +
		"git update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,sub"
	log := &memLog{}
	rec := NewRecorder(log, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
	var warned []string
	p, err := Spawn(SpawnOptions{
		Sandbox: newSandbox(t),
		Spec: sandbox.Spec{
			Kind: sandbox.KindPlugin, Name: "core-test", Path: "/bin/sh", Args: []string{"sh", "-c", script},
			Env:    []string{"PATH=/usr/bin:/bin", "HOME=" + proj, "GIT_CONFIG_NOSYSTEM=1"},
			Access: sandbox.Access{ReadExec: policy.SystemPaths, ReadWrite: []string{proj}, ReadOnly: []string{"/etc"}},
			Limits: sandbox.Limits{Pids: 32, MemoryBytes: 256 << 20},
		},
		Cwd: proj, Recorder: rec, Warn: func(m string) { warned = append(warned, m) },
	})
	require.NoError(t, err)
	ex := p.Finish(nil)
	require.Equal(t, 0, ex.Code)
	hostGit("status")
	assert.NoFileExists(t, marker, "the user's git status ran the planted fsmonitor")
	assert.NoDirExists(t, filepath.Join(proj, "sub", ".git"))
	ev := log.events()
	require.Contains(t, ev, "git_repo_quarantined/deny/"+string(reason.PathEscape))
	assert.Equal(t, "plugin_exit/allow/ok", ev[len(ev)-1], "plugin_exit comes last: %v", ev)
	last := log.recs[len(log.recs)-1]
	assert.EqualValues(t, 1, last.Details["git_quarantined"])
	require.Len(t, warned, 1)
	assert.True(t, strings.Contains(warned[0], filepath.Join(proj, "sub", ".git.fledge-quarantine-")), warned[0])
}
