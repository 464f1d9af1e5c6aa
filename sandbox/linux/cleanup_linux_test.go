// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runGroups lists the run cgroups (fledge-<name>-<id>) under every parent the sandbox uses.
func runGroups(t *testing.T, sb *Sandbox, name string) []string {
	t.Helper()
	parents := []string{sb.cg.unified}
	for _, p := range sb.cg.v1 {
		parents = append(parents, p)
	}
	var out []string
	for _, p := range parents {
		if p == "" {
			continue
		}
		ents, err := os.ReadDir(p)
		require.NoError(t, err)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "fledge-"+name+"-") {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}

// TestCgroupsRemovedAfterRuns: every run's cgroups (unified and v1) are gone once Close
// has waited for the background cleanup, including after a timeout kill.
func TestCgroupsRemovedAfterRuns(t *testing.T) {
	sb, err := New(Options{Launch: testLaunch})
	require.NoError(t, err)
	requireCgroup(t, sb)
	e := newEnv(t)
	const name = "cleanup-probe"
	// While a run is alive its groups exist (so the final check is not vacuous).
	live := e.spec("sleep 30")
	live.Name = name
	p, err := sb.Start(context.Background(), live)
	require.NoError(t, err)
	assert.NotEmpty(t, runGroups(t, sb, name))
	require.NoError(t, p.Kill())
	waitFor(t, p)
	for _, script := range []string{"true", "exit 3", "sleep 30"} {
		spec := e.spec(script)
		spec.Name = name
		spec.Limits.Timeout = 300e6 // 0.3 s: the last one is killed
		res, _, _ := run(t, sb, spec)
		require.NotNil(t, res)
	}
	require.NoError(t, sb.Close())
	assert.Empty(t, runGroups(t, sb, name))
}
