package linux

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/internal/testing/testutil"
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
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireCgroup(t, sb)
	testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no v1 groups: no spare threads")
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "bounding capabilities are dropped as root only")
	probe := openThreadExit(false)
	testutil.SkipUnlessSupported(t, probe != nil, "no thread pidfds (Linux 6.9)")
	probe.Close()
	host, ok := threadState(t, strconv.Itoa(os.Getpid()))
	require.True(t, ok)
	require.Contains(t, host, "NoNewPrivs: 0")
	require.Contains(t, host, "Seccomp: 0")
	require.NotContains(t, host, "CapBnd: 0000000000000000")

	e := newEnv(t)
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
	require.Eventually(t, func() bool {
		n, states := confined()
		return n == 1 && len(states) == 1
	}, 5*time.Second, time.Millisecond, "exactly the parked spare's thread differs from the host's, confined")

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
// groups (a new one, given every registration), not go ahead with none: the gate of its
// fork and the host-death cleanup of its tree depend on it.
func TestSpareRunReplacesDeadWatchdog(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
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
