// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestViewTemplateProtectedReplacedOnHost: git rewrites .git/config by writing config.lock
// and renaming it over config (git config, git remote add, git branch -u ...). The rename
// detaches, in every mount namespace, the read-only bind a cached view template put on the
// old config; a fresh view would protect the new file. A later run of the same session,
// working in a subdirectory of the repository (so its own working-directory tree does not
// re-protect .git), must still be refused a write to .git/config.
func TestViewTemplateProtectedReplacedOnHost(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	require.NotNil(t, sb.templates)
	repo := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "src"), 0o755))
	gitCmd(t, repo, "init", "-q", ".")
	cfg := filepath.Join(repo, ".git", "config")
	script := attemptScript + `attempt config sh -c 'printf "[core]\n\tfsmonitor = ./evil\n" >> ../.git/config'
attempt hook sh -c 'printf "#!/bin/sh\necho pwned\n" > ../.git/hooks/pre-commit'`

	res, out, errOut := run(t, sb, gitAttackSpec(t, script, filepath.Join(repo, "src"), repo))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	requireRefused(t, out, "config", "hook")
	sb.templates.mu.Lock()
	require.Len(t, sb.templates.m, 1, "the first run built the session's template")
	sb.templates.mu.Unlock()

	// The user runs git config on the host between two runs.
	gitCmd(t, repo, "config", "user.name", "someone")
	// And a hooks directory made again (git init --template, a hook manager).
	require.NoError(t, os.RemoveAll(filepath.Join(repo, ".git", "hooks")))
	require.NoError(t, os.Mkdir(filepath.Join(repo, ".git", "hooks"), 0o755))

	res, out, errOut = run(t, sb, gitAttackSpec(t, script, filepath.Join(repo, "src"), repo))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	requireRefused(t, out, "config", "hook")
	b, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "fsmonitor", "the host's .git/config was rewritten from a confined command")
	assert.NoFileExists(t, filepath.Join(repo, ".git", "hooks", "pre-commit"))
}
