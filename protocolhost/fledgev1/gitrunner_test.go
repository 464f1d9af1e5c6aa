// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fledgehq/fledge/project"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSandboxedGitIsConfined: the runner the host uses for git confines whatever it runs:
// the project is read-only, the home directory unreadable, output bounded.
func TestSandboxedGitIsConfined(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	require.NoError(t, os.MkdirAll(filepath.Join(f.home, ".ssh"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(f.home, ".ssh", "id_rsa"), []byte("KEY-MATERIAL"), 0o600))
	run := SandboxedGit(f.opts.Sandbox, f.opts.GitAccess)
	env := []string{"PATH=/usr/bin:/bin"}

	out, err := run(context.Background(), f.project, []string{"sh", "-c", "cat fledge.toml"}, env, 1<<20)
	require.NoError(t, err, "the project is readable")
	assert.Contains(t, string(out), "proj")

	_, err = run(context.Background(), f.project, []string{"sh", "-c", "touch written"}, env, 1<<20)
	assert.Error(t, err, "the project is read-only")
	assert.NoFileExists(t, filepath.Join(f.project, "written"))

	out, _ = run(context.Background(), f.project, []string{"sh", "-c", "cat " + filepath.Join(f.home, ".ssh", "id_rsa")}, env, 1<<20)
	assert.NotContains(t, string(out), "KEY-MATERIAL")

	_, err = run(context.Background(), f.project, []string{"sh", "-c", "head -c 5000 /dev/zero"}, env, 1000)
	assert.ErrorIs(t, err, project.ErrGitOutputTooLarge)

	// And real git works through it.
	gitOut, err := project.GitWith(context.Background(), run, f.project, "--version")
	require.NoError(t, err)
	assert.Contains(t, gitOut, "git version")
}
