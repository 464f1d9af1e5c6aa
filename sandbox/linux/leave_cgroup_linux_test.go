// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The launch thread joins a run's v1 groups so the child forks into them, then enters the
// private filesystem view (no /sys) before the fork. It must still leave those groups once
// the child is started: a thread of fledge left in a run's freezer group would be frozen by
// a freezer tree kill (and a frozen Go thread stalls every stop-the-world of the host).
// It leaves after the child's pid was handed back (off the exec's path), and before
// anything signals, kills or removes the run's groups: every second run here is killed at
// once, racing the leave, and no thread of fledge may be in the groups when Kill returns.
//
// Where the kernel has thread pidfds the thread exits in the groups instead of migrating
// out (threadexit_linux.go), and what touches the groups waits for its death: both ways
// are run here.
func TestLaunchThreadLeavesRunGroups(t *testing.T) {
	for _, leave := range []bool{false, true} {
		name := "exit"
		if leave {
			name = "leave"
		}
		t.Run(name, func(t *testing.T) { testLaunchThreadLeavesRunGroups(t, leave) })
	}
}

func testLaunchThreadLeavesRunGroups(t *testing.T, leave bool) {
	sb := newSandbox(t, Options{DisableLauncher: true})
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no writable v1 hierarchy")
	testutil.SkipUnlessSupported(t, sb.Report().FilesystemView != "" && os.Geteuid() == 0, "no private filesystem view here")
	if !leave {
		probe := openThreadExit(false)
		if probe == nil {
			t.Skip("no thread pidfds (Linux 6.9): launch threads migrate out (the leave case)")
		}
		probe.Close()
	}
	sb.leaveForTest = leave
	e := newEnv(t)
	// The leave held back a while, so the kill below always races it.
	leaveDelayForTest = 30 * time.Millisecond
	t.Cleanup(func() { leaveDelayForTest = 0 })
	for i := 0; i < 20; i++ {
		spec := e.spec("sleep 5")
		// Limits, so the run has v1 groups (memory, pids) the thread joins.
		spec.Limits.MemoryBytes, spec.Limits.Pids = 1<<30, 256
		p, err := sb.Start(context.Background(), spec)
		require.NoError(t, err)
		proc := p.(*process)
		require.NotNil(t, proc.cg)
		assert.Equal(t, leave, proc.launchExit == nil, "the thread exits in the groups unless told to leave")
		if i%2 == 0 {
			require.NoError(t, p.Kill())
		} else {
			proc.awaitLeft()
		}
		run, _ := proc.cg.v1Dirs()
		require.NotEmpty(t, run, "the run has v1 groups")
		for _, d := range run {
			data, err := os.ReadFile(filepath.Join(d, "tasks"))
			if (os.IsNotExist(err) || errors.Is(err, syscall.ENODEV)) && i%2 == 0 {
				continue // killed: the run may be over and its groups removed already
			}
			require.NoError(t, err)
			for _, f := range strings.Fields(string(data)) {
				_, err := os.Stat(filepath.Join("/proc/self/task", f))
				assert.True(t, os.IsNotExist(err), "thread %s of fledge still in the run's group %s", f, d)
			}
		}
		require.NoError(t, p.Kill())
		res, err := p.Wait()
		require.NoError(t, err)
		assert.Equal(t, 137, res.ExitCode, "killed, run %d", i)
	}
}
