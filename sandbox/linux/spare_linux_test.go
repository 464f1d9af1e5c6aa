// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpareNeverLoosensLimits: a run takes the pre-made spare only when it was made for
// the same limits; a run asking for tighter limits gets groups with its own limits, and
// the spare made for the old limits is thrown away.
func TestSpareNeverLoosensLimits(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	if len(sb.cg.v1) == 0 {
		t.Skip("pure cgroup v2: no v1 joins, no spares")
	}
	e := newEnv(t)
	pidsMax := func(pids int64) string {
		spec := e.spec("sleep 30")
		spec.Limits.Pids = pids
		p, err := sb.Start(context.Background(), spec)
		require.NoError(t, err)
		defer func() { _ = p.Kill(); waitFor(t, p) }()
		d := p.(*process).cg.v1["pids"]
		require.NotEmpty(t, d)
		b, err := os.ReadFile(filepath.Join(d, "pids.max"))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	assert.Equal(t, "256", pidsMax(256))
	// Give the background spare a moment, then the next run must come from it.
	require.Eventually(t, func() bool {
		sb.spares.mu.Lock()
		defer sb.spares.mu.Unlock()
		return sb.spares.ready != nil
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, "256", pidsMax(256), "the spare made for the same limits")
	assert.EqualValues(t, 1, sb.spares.hits.Load(), "the second run was launched from the spare")
	assert.Equal(t, "16", pidsMax(16), "a spare made for 256 must not be used for 16")
	assert.Equal(t, "16", pidsMax(16))
	// The launch from a spare still confines: a later run cannot read the fake key.
	res, out, _ := run(t, sb, e.spec("cat "+filepath.Join(e.home, ".ssh", "id_rsa")+" || echo denied"))
	assert.Equal(t, 0, res.ExitCode)
	assert.Contains(t, out, "denied")
	assert.NotContains(t, out, "SECRET-KEY")
}
