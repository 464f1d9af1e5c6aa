// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// threadState is what a launch thread changes on itself: its bounding set, no_new_privs,
// its seccomp mode (/proc/self/task/TID/status) and its cgroups.
func threadState(t *testing.T, tid string) (state string, ok bool) {
	t.Helper()
	dir := filepath.Join("/proc/self/task", tid)
	st, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return "", false // exited meanwhile
	}
	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return "", false
	}
	var keep []string
	for _, l := range strings.Split(string(st), "\n") {
		for _, k := range []string{"CapBnd:", "NoNewPrivs:", "Seccomp:"} {
			if strings.HasPrefix(l, k) {
				keep = append(keep, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return strings.Join(keep, "; ") + "; cgroups:\n" + string(cg), true
}

// TestLaunchThreadsNeverRejoinTheHost: a launch thread takes on its child's confinement
// (no bounding capabilities, no_new_privs, a seccomp filter, the run's v1 groups) and must
// never go back to the host's pool of threads, where any later goroutine of fledge would
// run under it. A spare's parked thread drops its bounding set before it knows its run; it
// must die whatever becomes of it: launched from, thrown away for another plugin or other
// limits, or released when the sandbox closes. Runs that fail on the thread (no such
// program) count too. Afterwards every thread of the process is in the state the main
// thread is in. The control: the parked spare's thread, seen before Close, is confined
// (no bounding set, the run's groups), so the check sees a thread that kept it.
func TestLaunchThreadsNeverRejoinTheHost(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no v1 groups: no spare threads")
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "bounding capabilities are dropped as root only")
	// Without thread pidfds (before Linux 6.9) spares do not confine ahead and launch
	// threads migrate out: the end state must be the same, only the control differs.
	probe := openThreadExit(false)
	ahead := probe != nil
	if ahead {
		probe.Close()
	}
	host, ok := threadState(t, strconv.Itoa(os.Getpid()))
	require.True(t, ok)
	require.Contains(t, host, "NoNewPrivs: 0")
	require.Contains(t, host, "Seccomp: 0")
	require.NotContains(t, host, "CapBnd: 0000000000000000")

	e := newEnv(t)
	// A denied file and a hard link to it: the names pass checkAccess, the ruleset refuses
	// the inode (after the run took its spare).
	denied := filepath.Join(e.config, "plugins.toml")
	alias := filepath.Join(e.outside, "alias")
	require.NoError(t, os.Link(denied, alias))
	for i := 0; i < 24; i++ {
		spec := e.spec("true")
		// Other names and limits throw the ready spare away (takeSpare).
		spec.Name = []string{"a", "a", "b", "a"}[i%4]
		spec.Limits.MemoryBytes, spec.Limits.Pids = 1<<30, 200
		if i%7 == 6 {
			spec.Limits.Pids = 300
		}
		if i%2 == 1 {
			// Let the spare be made, so this run is launched from it (or throws it away).
			time.Sleep(20 * time.Millisecond)
		}
		if i%6 == 2 {
			spec.Access.ReadOnly = append(spec.Access.ReadOnly, alias)
			spec.Access.Deny = append(spec.Access.Deny, denied)
			_, err := sb.Start(context.Background(), spec)
			require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "run %d", i)
			continue
		}
		if i%5 == 4 {
			spec.Path, spec.Args = "/nonexistent/program", []string{"program"}
			_, err := sb.Start(context.Background(), spec)
			require.Error(t, err, "run %d", i)
			continue
		}
		res, _, _ := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "run %d", i)
	}
	assert.Positive(t, sb.spares.hits.Load(), "some runs were launched from a spare")

	// The control: the parked spare is confined ahead and sits in its run's groups.
	require.Eventually(t, func() bool {
		sb.spares.mu.Lock()
		defer sb.spares.mu.Unlock()
		return sb.spares.ready != nil
	}, 5*time.Second, time.Millisecond)
	// Launch threads of the last runs and thrown-away spares die in the background; the
	// parked one stays.
	confined := func() (n int, states []string) {
		tids, err := os.ReadDir("/proc/self/task")
		require.NoError(t, err)
		for _, d := range tids {
			if st, ok := threadState(t, d.Name()); ok && st != host {
				states = append(states, st)
				if strings.Contains(st, "CapBnd: 0000000000000000") {
					n++
				}
			}
		}
		return n, states
	}
	if ahead {
		require.Eventually(t, func() bool {
			n, states := confined()
			return n == 1 && len(states) == 1
		}, 5*time.Second, time.Millisecond, "exactly the parked spare's thread differs from the host's, confined")
	}

	require.NoError(t, sb.Close())
	tids, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	for _, d := range tids {
		st, ok := threadState(t, d.Name())
		if !ok {
			continue
		}
		assert.Equal(t, host, st, "thread %s of fledge kept a launch thread's state", d.Name())
	}
}

// TestSpareRunReplacesDeadWatchdog: a run launched from a spare adds groups the watchdog
// already has (registered when the spare was made), so nothing is sent for them. If the
// watchdog was killed meanwhile, that run must still get a live watchdog holding its
// groups (a new one, given every registration), not go ahead with none: the host-death
// cleanup of its tree depends on it.
func TestSpareRunReplacesDeadWatchdog(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no v1 groups: no spares")
	testutil.SkipUnlessSupported(t, sb.guard.available(), "no host-death watchdog here")
	e := newEnv(t)
	res, _, _ := run(t, sb, e.spec("true"))
	require.Equal(t, 0, res.ExitCode)
	require.Eventually(t, func() bool {
		sb.spares.mu.Lock()
		defer sb.spares.mu.Unlock()
		return sb.spares.ready != nil
	}, 5*time.Second, time.Millisecond)

	sb.guard.mu.Lock()
	old, exited := sb.guard.proc, sb.guard.exited
	sb.guard.mu.Unlock()
	require.NotNil(t, old)
	require.NoError(t, old.Kill())
	<-exited

	hits := sb.spares.hits.Load()
	p, err := sb.Start(context.Background(), e.spec("sleep 30"))
	require.NoError(t, err)
	defer func() { _ = p.Kill(); waitFor(t, p) }()
	assert.Equal(t, hits+1, sb.spares.hits.Load(), "launched from the spare")
	proc := p.(*process)
	assert.Empty(t, proc.mode.Degraded)
	sb.guard.mu.Lock()
	cur, curExited := sb.guard.proc, sb.guard.exited
	regs := make(map[string]bool, len(sb.guard.regs))
	for k, v := range sb.guard.regs {
		regs[k] = v
	}
	sb.guard.mu.Unlock()
	require.NotNil(t, cur)
	assert.NotEqual(t, old.Pid, cur.Pid, "a new watchdog")
	select {
	case <-curExited:
		t.Fatal("the new watchdog is not running")
	default:
	}
	for _, it := range proc.cg.guardItems() {
		assert.True(t, regs[it], "%s registered", it)
	}
}

// TestSpareIPCNamespacePerRun: a spare makes its run's IPC namespace ahead, on its parked
// thread. Each run must still get one of its own: a run launched from a spare cannot see
// a System V segment that the run before it (still running) made, and the two name
// different namespaces, neither the host's. The control: the first run lists its own
// segment, so the listing shows segments where there are any.
func TestSpareIPCNamespacePerRun(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no v1 groups: no spares")
	testutil.SkipUnlessSupported(t, sb.ipcns, "no IPC namespace per run here")
	for _, tool := range []string{"/usr/bin/ipcmk", "/usr/bin/ipcs"} {
		_, err := os.Stat(tool)
		testutil.SkipUnlessSupported(t, err == nil, tool+" (util-linux) not installed")
	}
	hostNS, err := os.Readlink("/proc/self/ns/ipc")
	require.NoError(t, err)
	e := newEnv(t)
	waitSpare := func() {
		require.Eventually(t, func() bool {
			sb.spares.mu.Lock()
			defer sb.spares.mu.Unlock()
			return sb.spares.ready != nil
		}, 5*time.Second, time.Millisecond)
	}
	// A first run, so the one below is launched from a spare.
	res, _, _ := run(t, sb, e.spec("true"))
	require.Equal(t, 0, res.ExitCode)
	waitSpare()

	outA := &testutil.SyncBuffer{}
	specA := e.spec(`readlink /proc/self/ns/ipc; ipcmk -M 4096; ipcs -m; echo ready; sleep 30`)
	specA.Stdout = outA
	hits := sb.spares.hits.Load()
	pa, err := sb.Start(context.Background(), specA)
	require.NoError(t, err)
	defer func() { _ = pa.Kill(); waitFor(t, pa) }()
	require.Eventually(t, func() bool { return strings.Contains(outA.String(), "ready") }, 10*time.Second, 5*time.Millisecond)
	waitSpare()
	resB, outB, errB := run(t, sb, e.spec(`readlink /proc/self/ns/ipc; ipcs -m`))
	require.Equal(t, 0, resB.ExitCode, "%s%s", outB, errB)
	assert.Equal(t, hits+2, sb.spares.hits.Load(), "both runs launched from a spare")

	a := outA.String()
	idLine := ""
	for _, l := range strings.Split(a, "\n") {
		if strings.HasPrefix(l, "Shared memory id:") {
			idLine = l
		}
	}
	require.NotEmpty(t, idLine, "run A made a segment: %s", a)
	shmid := strings.TrimSpace(strings.TrimPrefix(idLine, "Shared memory id:"))
	nsA, nsB := strings.SplitN(a, "\n", 2)[0], strings.SplitN(outB, "\n", 2)[0]
	require.True(t, strings.HasPrefix(nsA, "ipc:["), a)
	require.True(t, strings.HasPrefix(nsB, "ipc:["), outB)
	assert.NotEqual(t, nsA, nsB, "two runs share an IPC namespace")
	assert.NotEqual(t, hostNS, nsA)
	assert.NotEqual(t, hostNS, nsB)
	segs := func(listing string) []string {
		var ids []string
		for _, l := range strings.Split(listing, "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[0], "0x") {
				ids = append(ids, f[1])
			}
		}
		return ids
	}
	assert.Contains(t, segs(a), shmid, "control: run A lists its own segment")
	assert.NotContains(t, segs(outB), shmid, "run B sees run A's segment: %s", outB)
	assert.Empty(t, segs(outB), "run B's IPC namespace is not fresh: %s", outB)
}

// TestSpareLaunchedRootCommandHasNoCapabilities: a spare empties its thread's bounding set
// ahead, and the launch from it then only clears the ambient and inheritable sets. A root
// command launched from a spare must still have every capability set empty (the attack of
// TestRootCommandHasNoCapabilities: mknod of a raw disk).
func TestSpareLaunchedRootCommandHasNoCapabilities(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root to prove capabilities are dropped")
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no v1 groups: no spares")
	e := newEnv(t)
	for i := 0; i < 3; i++ {
		require.Eventually(t, func() bool {
			sb.spares.mu.Lock()
			defer sb.spares.mu.Unlock()
			return sb.spares.ready != nil || i == 0
		}, 5*time.Second, time.Millisecond)
		hits := sb.spares.hits.Load()
		res, out, errOut := run(t, sb, e.spec(`grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; mknod blockdev b 8 0 && echo MKNOD-OK; exit 0`))
		require.Equal(t, 0, res.ExitCode, errOut)
		if i > 0 {
			require.Equal(t, hits+1, sb.spares.hits.Load(), "run %d launched from the spare", i)
		}
		n := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "Cap") {
				assert.Equal(t, "0000000000000000", f[1], "run %d: capability set not empty: %s", i, line)
				n++
			}
		}
		assert.Equal(t, 5, n, "run %d: %s", i, out)
		assert.NotContains(t, out, "MKNOD-OK")
		assert.NoFileExists(t, filepath.Join(e.project, "blockdev"))
	}
}
