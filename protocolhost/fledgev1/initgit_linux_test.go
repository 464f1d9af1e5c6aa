// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestInitGitInfoThroughConfinedGit: what a real plugin's init says about the project's
// git, read by the confined git: the branch, dirtiness and the remote (credentials
// stripped) in a repository, with no more git launches than status, remote and get-url;
// null outside any, with none.
func TestInitGitInfoThroughConfinedGit(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")

	for _, repo := range []bool{true, false} {
		name := map[bool]string{true: "repository", false: "no repository"}[repo]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "scripted.py", allGrants)
			if _, err := os.Lstat(filepath.Join(filepath.Dir(f.project), ".git")); err == nil {
				t.Fatal("the fixture's project has a .git above it")
			}
			if repo {
				gitIn(t, f.project, "init", "-q", "-b", "trunk")
				gitIn(t, f.project, "add", "-f", "fledge.toml")
				gitIn(t, f.project, "commit", "-q", "-m", "one")
				gitIn(t, f.project, "remote", "add", "origin", "https://user:s3cret@example.com/o/p.git")
				require.NoError(t, os.WriteFile(filepath.Join(f.project, "untracked"), nil, 0o644))
			}
			confined := SandboxedGit(f.opts.Sandbox, f.opts.GitAccess)
			launches := 0
			counting := func(ctx context.Context, dir string, argv, env []string, maxOut int) ([]byte, error) {
				launches++
				return confined(ctx, dir, argv, env, maxOut)
			}
			f.opts.InitProject = InitProject(context.Background(), counting, &project.Info{Root: f.project, Name: "proj"})

			_, rep := f.runScript()
			require.NotNil(t, rep.Init.Project)
			if !repo {
				assert.Nil(t, rep.Init.Project.Git)
				assert.Zero(t, launches, "git launched outside any repository")
				return
			}
			g := rep.Init.Project.Git
			require.NotNil(t, g, "stderr:\n%s", f.stderr.String())
			assert.Equal(t, "trunk", g.Branch)
			assert.True(t, g.Dirty, "an untracked file")
			assert.Equal(t, "origin", g.Remote)
			assert.Equal(t, "https://example.com/o/p.git", g.RemoteURL)
			assert.Equal(t, 3, launches, "status, remote, remote get-url")
		})
	}
}

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}
