// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// These tests attack the host for real. They run only inside the containment harness
// (RunContained in TestMain), so a regression fails the run instead of the machine.

func TestForkBomb(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	requireCgroup(t, sb)
	e := newEnv(t)
	m := marker(t)
	spec := e.spec(`b() { b | b & }; b; sleep 1000`, m)
	spec.Limits.Pids = 64
	spec.Limits.Timeout = 2 * time.Second
	spec.Limits.KillGrace = 200 * time.Millisecond
	res, _, errOut := run(t, sb, spec)
	// Either the timeout ended it or the main shell itself hit the pids limit and gave up;
	// both are fine as long as the limit held and nothing survived.
	assert.True(t, res.TimedOut || res.ExitCode != 0, "result %+v", res)
	// The kernel refused forks: the limit was reached and held. (Killed counts distinct
	// pids over the whole kill sequence, in which the bomb keeps refilling its 64 slots, so
	// it only bounds the churn, loosely.)
	assert.Regexp(t, `(?i)cannot fork|resource temporarily unavailable`, errOut, "no fork was refused")
	assert.LessOrEqual(t, res.Killed, 64*8, "kill sequence bounded")
	assert.Empty(t, survivors(m))
	// The host still runs commands.
	res, out, _ := run(t, sb, e.spec("echo alive"))
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "alive\n", out)
}

func TestMemoryBomb(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	requireCgroup(t, sb)
	exe, err := os.Executable()
	require.NoError(t, err)
	e := newEnv(t)
	spec := e.spec("true")
	spec.Path, spec.Args = exe, []string{exe}
	spec.Env = []string{helperEnv + "=alloc"}
	spec.Access.ReadExec = append([]string{filepath.Dir(exe)}, SystemReadExec...)
	spec.Limits.MemoryBytes = 64 << 20
	res, out, _ := run(t, sb, spec)
	assert.True(t, res.OOMKilled, "exit %d %s: %s", res.ExitCode, res.Signal, out)
	assert.Equal(t, "SIGKILL", res.Signal)
	assert.NotContains(t, out, "allocated")
	assert.Greater(t, res.PeakMemory, int64(32<<20))
}

func TestKillHostFromInside(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	testutil.SkipUnlessSupported(t, sb.LandlockABI() >= 6, "signal scoping needs Landlock ABI 6")
	e := newEnv(t)
	// A bystander outside the sandbox that kill -1 would reach.
	bystander := exec.Command("sleep", "1000")
	bystander.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, bystander.Start())
	defer func() { _ = bystander.Process.Kill(); _ = bystander.Wait() }()

	for _, tc := range []struct {
		script string
		failed bool // the kill itself must report failure
	}{
		{"kill -9 " + strconv.Itoa(os.Getpid()), true},
		{"kill -9 " + strconv.Itoa(bystander.Process.Pid), true},
		{"kill -9 -" + strconv.Itoa(bystander.Process.Pid), true},
		// kill(-1) reports success when the kernel finds nothing it may signal; what counts
		// is that the host (this process) and the bystander are still alive afterwards.
		{"kill -9 -1", false},
	} {
		t.Run(tc.script, func(t *testing.T) {
			res, _, errOut := run(t, sb, e.spec(tc.script))
			if tc.failed {
				assert.NotEqual(t, 0, res.ExitCode, errOut)
			}
			require.NoError(t, syscall.Kill(bystander.Process.Pid, 0), "bystander killed")
		})
	}
	res, out, _ := run(t, sb, e.spec("echo alive"))
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "alive\n", out)
}
