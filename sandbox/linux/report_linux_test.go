// SPDX-License-Identifier: MIT

package linux

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestReport(t *testing.T) {
	wantMode := map[cgroups.CGMode]string{
		cgroups.Unified: CgroupV2, cgroups.Hybrid: CgroupHybrid, cgroups.Legacy: CgroupV1, cgroups.Unavailable: CgroupNone,
	}[cgroups.Mode()]
	t.Run("this machine", func(t *testing.T) {
		r := newSandbox(t, Options{}).Report()
		assert.Equal(t, "linux", r.OS)
		assert.NotEmpty(t, r.Kernel)
		assert.Equal(t, kernel.LandlockABI(), r.LandlockABI)
		assert.Equal(t, wantMode, r.CgroupMode)
		if r.LandlockABI > 0 {
			assert.Equal(t, "landlock", r.Confinement)
		}
		if r.CgroupWritable {
			assert.Contains(t, []string{KillCgroup, KillFreezer}, r.TreeKill)
			assert.NotEmpty(t, r.CgroupPath)
		}
		// This test binary calls stub.MaybeRun, so the watchdog can run; as root the view
		// can be built; on x86-64 and arm64 the deny-list is there.
		assert.Equal(t, "watchdog", r.HostDeath)
		if os.Geteuid() == 0 {
			assert.Equal(t, "mount-namespace", r.FilesystemView)
		}
		if kernel.SeccompSupported() {
			assert.Equal(t, len(kernel.DeniedSyscalls(kernel.Filter{DenyUnix: true})), len(r.SeccompDenied))
		}
		_, err := json.Marshal(r)
		require.NoError(t, err)
	})
	t.Run("everything disabled", func(t *testing.T) {
		r := newSandbox(t, Options{DisableLandlock: true, DisableCgroups: true, DisableNetNS: true}).Report()
		assert.Equal(t, "none", r.Confinement)
		assert.Equal(t, 0, r.LandlockABI)
		assert.False(t, r.CgroupWritable)
		assert.Equal(t, KillPgroup, r.TreeKill)
		assert.Equal(t, "none", r.NetworkDeny)
		assert.Len(t, r.Warnings, 3)
	})
}

// TestLegacyFreezerKill runs the tree-kill tests the way a cgroup v1-only machine does
// them: no unified group, the v1 freezer freezes, kills and thaws.
func TestLegacyFreezerKill(t *testing.T) {
	sb := legacyFreezerSandbox(t)
	e := newEnv(t)

	m := marker(t)
	spec := e.spec(`setsid sh -c 'trap "" TERM; sleep 1000' "$1" & (setsid sh -c 'sleep 1000' "$1" &) ; trap "" TERM; sleep 1000`, m)
	spec.Limits.Timeout = 300 * time.Millisecond
	res, _, _ := run(t, sb, spec)
	assert.True(t, res.TimedOut)
	assert.Equal(t, KillFreezer, res.Mode.TreeKill)
	assert.GreaterOrEqual(t, res.Killed, 3)
	assert.Empty(t, survivors(m))

	m = marker(t)
	res, _, _ = run(t, sb, e.spec(`(setsid sh -c 'sleep 1000' "$1" </dev/null >/dev/null 2>&1 &); exit 0`, m))
	assert.Equal(t, 0, res.ExitCode)
	assert.Empty(t, survivors(m))
}

// legacyFreezerSandbox is a sandbox that kills trees the way a cgroup v1-only machine
// does: no unified group, the v1 freezer.
func legacyFreezerSandbox(t *testing.T) *Sandbox {
	t.Helper()
	sb := newSandbox(t, Options{})
	testutil.SkipUnlessSupported(t, sb.cg.v1["freezer"] != "", "no writable v1 freezer hierarchy")
	env := *sb.cg
	env.unified = ""
	sb.cg = &env
	require.Equal(t, KillFreezer, sb.Report().TreeKill)
	return sb
}

// TestLegacyFreezerKillWhileForking kills trees that fork without pause, so the freeze
// meets tasks mid-fork and shells in vfork (a parent caught entering its wait for the
// child used to keep the group FREEZING, and the failed freeze left the killed tasks
// frozen: "cgroup not empty after kill"). Every kill must leave nothing and report no
// cleanup error. The pids limit bounds the churn.
func TestLegacyFreezerKillWhileForking(t *testing.T) {
	sb := legacyFreezerSandbox(t)
	e := newEnv(t)
	for _, tc := range []struct {
		name, script string
		timeout      time.Duration
		runs         int
	}{
		// The kill comes as the subshell vforks its background child: the flake's case.
		{"main exits as a child forks", `(setsid sh -c 'sleep 1000' "$1" </dev/null >/dev/null 2>&1 &); exit 0`, 0, 20},
		// The loop ignores the timeout's SIGTERM, so the kill meets it forking (a loop that
		// died of the SIGTERM could leave nothing to kill: Killed 0, seen at load 17).
		{"timeout in a fork loop", `trap "" TERM; while :; do (sh -c : "$1" &); done`, 200 * time.Millisecond, 5},
		{"main exits, a fork loop goes on", `(setsid sh -c 'while :; do (sh -c : "$1" &); done' "$1" </dev/null >/dev/null 2>&1 &); sleep 0.1; exit 0`, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.runs {
				m := marker(t)
				spec := e.spec(tc.script, m)
				spec.Limits.Pids = 64
				if tc.timeout > 0 {
					spec.Limits.Timeout = tc.timeout
				}
				res, _, _ := run(t, sb, spec) // fails on a cleanup error (freeze, not empty)
				assert.Equal(t, tc.timeout > 0, res.TimedOut)
				assert.Equal(t, KillFreezer, res.Mode.TreeKill)
				assert.GreaterOrEqual(t, res.Killed, 1)
				assert.Empty(t, survivors(m))
			}
		})
	}
}

// TestNoCgroupProcessGroupKill: without cgroups the process group still dies on timeout
// and after the main process exits, and the result says the mode is degraded.
func TestNoCgroupProcessGroupKill(t *testing.T) {
	sb := newSandbox(t, Options{DisableCgroups: true})
	e := newEnv(t)
	m := marker(t)
	spec := e.spec(`sh -c 'trap "" TERM; sleep 1000' "$1" & trap "" TERM; sleep 1000`, m)
	spec.Limits.Timeout = 300 * time.Millisecond
	res, _, _ := run(t, sb, spec)
	assert.True(t, res.TimedOut)
	assert.Equal(t, KillPgroup, res.Mode.TreeKill)
	assert.Equal(t, CgroupNone, res.Mode.Cgroup)
	assert.NotEmpty(t, res.Mode.Degraded)
	assert.Empty(t, survivors(m))

	m = marker(t)
	res, _, _ = run(t, sb, e.spec(`sh -c 'sleep 1000' "$1" & exit 0`, m))
	assert.Equal(t, 0, res.ExitCode)
	assert.GreaterOrEqual(t, res.Killed, 1)
	assert.Empty(t, survivors(m))
}
