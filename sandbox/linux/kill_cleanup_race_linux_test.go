// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"testing"
	"time"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/require"
)

// TestKillRacingCleanupDoesNotStall: a Kill (or the timeout ladder's signal) that starts
// while the run is ending waits for the launch thread's death through its pidfd, and the
// run's cleanup, which waited for the same death, closes that pidfd. The Kill must then
// take the thread as gone: it was waited for already. Before, a closed pidfd read as "not
// exited yet" and the Kill polled it until leaveWait (5 s) ran out.
func TestKillRacingCleanupDoesNotStall(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no writable v1 hierarchy: the launch thread joins no group")
	probe := openThreadExit(false)
	testutil.SkipUnlessSupported(t, probe != nil, "no thread pidfds (Linux 6.9): launch threads migrate out")
	probe.Close()
	e := newEnv(t)
	// The launch thread is slow to exit, so Kill and the cleanup both wait for its death.
	leaveDelayForTest = 200 * time.Millisecond
	t.Cleanup(func() { leaveDelayForTest = 0 })
	for i := 0; i < 12; i++ {
		spec := e.spec("sleep 0.05")
		spec.Limits.MemoryBytes, spec.Limits.Pids = 1<<30, 64
		p, err := sb.Start(context.Background(), spec)
		require.NoError(t, err)
		require.NotNil(t, p.(*process).launchExit, "the launch thread exits in the groups")
		start := time.Now()
		require.NoError(t, p.Kill())
		took := time.Since(start)
		_, err = p.Wait()
		require.NoError(t, err)
		require.Less(t, took, 2*time.Second, "run %d: Kill stalled on the launch thread's closed pidfd", i)
	}
}

// TestTreeGoneCheckRacesForks: Wait skips the tree kill when one read of the unified
// group's cgroup.events says it is empty. A main process that exits while its children
// are still being forked (and those fork on: a daemon that double-forks at once) must
// never leave one behind: a fork in flight is counted in the group before its parent can
// exit. Run from spares and fresh threads alike, many times, checked in the process table.
func TestTreeGoneCheckRacesForks(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, sb.cg.unified != "", "no unified group: the tree is always killed")
	e := newEnv(t)
	m := marker(t)
	killed := 0
	for i := 0; i < 30; i++ {
		spec := e.spec(`for i in 1 2 3 4; do (setsid sh -c 'sleep 1000' "$1" </dev/null >/dev/null 2>&1 &) & done; exit 0`, m)
		spec.Limits.MemoryBytes, spec.Limits.Pids = 1<<30, 256
		res, _, _ := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "run %d", i)
		require.Empty(t, survivors(m), "run %d: a process of the tree outlived Wait", i)
		killed += res.Killed
	}
	// The control: the runs did leave processes behind their main one, which Wait killed.
	require.Positive(t, killed, "no run left a process to kill")
}
