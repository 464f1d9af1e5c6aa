// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// withLauncher runs the session's first command (which starts its launcher) and waits
// until the launcher is up, so that the next runs go through it.
func withLauncher(t *testing.T, sb *Sandbox, e *env) *launcher {
	t.Helper()
	requirePidNS(t, sb)
	for range launcherAfterRuns {
		res, out, errOut := run(t, sb, e.spec(`true`))
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		sb.launchers.mu.Lock()
		l := sb.launchers.m[launcherKey(e.spec("").Name, false)]
		sb.launchers.mu.Unlock()
		if l != nil {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the session's launcher did not start: %v", sb.launchers.lastErr.Load())
	return nil
}

// TestLauncherRunsCommands: after a session's first run, its commands go through the
// launcher, with the same results (output, exit code, working directory, TMPDIR).
func TestLauncherRunsCommands(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	before := sb.launchers.served.Load()
	res, out, errOut := run(t, sb, e.spec(`pwd; echo "$TMPDIR"; touch "$TMPDIR/x" && echo tmp-ok; exit 7`))
	assert.Equal(t, 7, res.ExitCode, "%s%s", out, errOut)
	assert.Contains(t, out, e.project+"\n")
	assert.Contains(t, out, "tmp-ok\n")
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the run did not go through the launcher")
}

// TestLauncherRlimitsFromFirstInstruction: RLIMIT_NOFILE and RLIMIT_CORE are set before
// execve, so not one of 100 commands sees the host's limits.
func TestLauncherRlimitsFromFirstInstruction(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	var host unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &host))
	before := sb.launchers.served.Load()
	for i := range 100 {
		spec := e.spec(`ulimit -n; ulimit -c`)
		spec.Limits.NoFile = 321
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		require.Equal(t, "321\n0\n", out, "run %d saw other limits (the host's soft limit is %d)", i, host.Cur)
	}
	assert.Equal(t, before+100, sb.launchers.served.Load())
}

// nsPid is pid's number in its own (innermost) pid namespace.
func nsPid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			n, err := strconv.Atoi(f[len(f)-1])
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no NSpid")
	return 0
}

// TestCommandCannotReachLauncher: a command launched by the session's launcher sees it in
// its pid namespace, with the same uid, but cannot signal it (Landlock's signal scope),
// trace it or read its memory, environment, fds, root or cwd (not dumpable, no
// CAP_SYS_PTRACE); the launcher goes on serving. (Its fd numbers can be listed, as the
// holder's: the directory is root's and so is the command.)
func TestCommandCannotReachLauncher(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	l := withLauncher(t, sb, e)
	lp := nsPid(t, l.proc.Pid)
	script := `p=$0
for s in TERM SEGV ABRT KILL STOP USR1; do kill -$s $p 2>/dev/null && echo "signalled $s"; done
for f in environ mem cmdline auxv syscall stack maps; do head -c 64 /proc/$p/$f >/dev/null 2>&1 && echo "read $f"; done
readlink /proc/$p/fd/0 >/dev/null 2>&1 && echo "read fd link"
ls /proc/$p/root/ >/dev/null 2>&1 && echo "listed root"
ls /proc/$p/cwd/ >/dev/null 2>&1 && echo "listed cwd"
for fd in 0 1 2 3 4 5 6; do cat /proc/$p/fd/$fd </dev/null >/dev/null 2>&1 && echo "opened fd $fd"; done
if command -v python3 >/dev/null; then python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, int(sys.argv[1]), 0, 0) == 0: print("attached")
' $p; fi
echo done`
	res, out, errOut := run(t, sb, e.spec(script, strconv.Itoa(lp)))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	// cmdline is readable by anyone for any process; the rest must not be.
	assert.Equal(t, "read cmdline\ndone\n", out, "a command reached the launcher (pid %d in the namespace)", lp)
	assert.True(t, l.alive(), "the launcher died")
	before := sb.launchers.served.Load()
	res, out, errOut = run(t, sb, e.spec(`echo ok`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the launcher stopped serving")
}

// TestKilledLauncherFailsNextExec: a launcher that died fails the next exec with a clear
// error and runs nothing (no unconfined or other path instead); the session then starts a
// new launcher.
func TestKilledLauncherFailsNextExec(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	l := withLauncher(t, sb, e)
	require.NoError(t, l.proc.Kill())
	for l.alive() {
		time.Sleep(5 * time.Millisecond)
	}
	mark := filepath.Join(e.project, "ran")
	spec := e.spec(`touch "$0"`, mark)
	spec.Stdout, spec.Stderr = io.Discard, io.Discard
	_, err := sb.Start(context.Background(), spec)
	require.Error(t, err, "an exec ran although the session's launcher was dead")
	assert.ErrorIs(t, err, sandbox.ErrLaunch)
	assert.ErrorIs(t, err, errLauncherGone)
	assert.Contains(t, err.Error(), "launcher is gone")
	_, statErr := os.Stat(mark)
	assert.True(t, os.IsNotExist(statErr), "the command ran")
	// The next run of the session launches (from a thread) and starts a new launcher.
	res, out, errOut := run(t, sb, e.spec(`echo again`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	l2 := withLauncher(t, sb, e)
	assert.NotEqual(t, l.proc.Pid, l2.proc.Pid)
}

// TestLauncherEndsWithSession: closing the sandbox (the session's end) ends its launcher.
func TestLauncherEndsWithSession(t *testing.T) {
	sb, err := New(Options{Launch: LaunchThread})
	require.NoError(t, err)
	e := newEnv(t)
	l := withLauncher(t, sb, e)
	pid := l.proc.Pid
	require.True(t, processAlive(pid))
	require.NoError(t, sb.Close())
	deadline := time.Now().Add(2 * time.Second)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.False(t, processAlive(pid), "the launcher outlived its session")
}

// TestLauncherRunsAreIsolated: two runs of one launcher at once: neither sees the other's
// TMPDIR or files in it, nor its System V IPC objects.
func TestLauncherRunsAreIsolated(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	before := sb.launchers.served.Load()
	// Read while the run still writes to it. The first run says its TMPDIR once its file
	// and IPC object exist, and stays until the second run is done (a file the test makes),
	// so the second looks while both are there however slow a loaded machine makes either.
	var out1 testutil.SyncBuffer
	release := filepath.Join(e.project, "release")
	spec1 := e.spec(`echo secret > "$TMPDIR/s"; command -v ipcmk >/dev/null && ipcmk -M 4096 >/dev/null; echo "$TMPDIR"; i=0; while [ ! -e "$0" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`, release)
	spec1.Stdout = &out1
	p1, err := sb.Start(context.Background(), spec1)
	require.NoError(t, err)
	deadline := time.Now().Add(waitBound)
	for !strings.Contains(out1.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	tmp1 := strings.TrimSpace(out1.String())
	require.NotEmpty(t, tmp1, "the first run never said its TMPDIR")
	res, out, errOut := run(t, sb, e.spec(`[ "$TMPDIR" = "$0" ] && echo same-tmp; cat "$0/s" 2>/dev/null && echo read-other; ls /tmp 2>/dev/null; command -v ipcs >/dev/null && ipcs -m | grep -c 4096; true`, tmp1))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.NotContains(t, out, "same-tmp")
	assert.NotContains(t, out, "secret")
	assert.NotContains(t, out, "read-other")
	assert.NotContains(t, out, filepath.Base(tmp1), "another run's TMPDIR is visible in /tmp")
	assert.NotContains(t, out, "\n1\n", "another run's IPC object is visible")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	r1 := waitFor(t, p1)
	assert.Equal(t, 0, r1.ExitCode)
	assert.False(t, r1.TimedOut)
	assert.Equal(t, before+2, sb.launchers.served.Load())
}

// TestLauncherRunsKeepNoDescriptors: runs through a session's launcher (most launched from
// a thread parked ahead in their groups) leave no descriptor of fledge behind. A parked
// thread's socket was once kept after its run: one socket per exec, until a long session
// (fledge serve, a bench of 1000 execs) met "too many open files".
func TestLauncherRunsKeepNoDescriptors(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	count := func() int {
		d, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(d)
	}
	runs := func(n int) {
		for range n {
			// Limits give the run v1 groups, where a launcher thread is parked ahead.
			spec := e.spec(`true`)
			spec.Limits.MemoryBytes, spec.Limits.Pids = 1<<30, 256
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		}
	}
	runs(10) // caches and spares settle
	served, before := sb.launchers.served.Load(), count()
	runs(60)
	require.GreaterOrEqual(t, sb.launchers.served.Load()-served, int64(50), "the runs went through the launcher")
	assert.LessOrEqual(t, count()-before, 4, "descriptors kept after 60 runs (before %d)", before)
}

// TestParkedThreadOfUnusedSpareKeepsNoDescriptors: a launcher thread parked ahead in the
// next run's v1 groups, when that run does not go through the launcher, is let go and
// leaves no descriptor of fledge behind and no group on disk: the next plugin session's
// own process (in a sandbox shared across sessions, as fledge serve and make bench have
// it), launched from a thread of fledge; a command the launcher is not sent (a working
// directory without a grant: its view is built afresh). Its socket was once kept, one per
// session, and the thread stayed in the run's groups, which were then left behind
// (newSandbox's cleanup checks they are gone).
func TestParkedThreadOfUnusedSpareKeepsNoDescriptors(t *testing.T) {
	for _, tc := range []struct {
		name string
		next func(spec *sandbox.Spec, outside *os.File)
	}{
		{"plugin process", func(spec *sandbox.Spec, _ *os.File) { spec.Kind = sandbox.KindPlugin }},
		{"command with a view built afresh", func(spec *sandbox.Spec, outside *os.File) {
			spec.Dir, spec.DirPath = outside, outside.Name()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: LaunchThread})
			testutil.SkipUnlessSupported(t, len(sb.cg.v1) > 0, "no v1 cgroup controllers: runs have no groups to park a thread in")
			e := newEnv(t)
			withLauncher(t, sb, e)
			outside, err := os.Open(e.outside) // a directory no grant covers
			require.NoError(t, err)
			t.Cleanup(func() { outside.Close() })
			count := func() int {
				d, err := os.ReadDir("/proc/self/fd")
				require.NoError(t, err)
				return len(d)
			}
			limited := func() *sandbox.Spec {
				// Limits give the run v1 groups, where a launcher thread is parked ahead.
				spec := e.spec(`true`)
				spec.Limits.MemoryBytes, spec.Limits.Pids = 1<<30, 256
				return spec
			}
			sessions := func(n int) {
				for range n {
					// A command through the launcher (the next run's spare gets a
					// parked thread), then a run that does not go through it.
					res, out, errOut := run(t, sb, limited())
					require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
					spec := limited()
					tc.next(spec, outside)
					res, out, errOut = run(t, sb, spec)
					require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
				}
			}
			sessions(4) // caches and spares settle
			hits, before := sb.spares.hits.Load(), count()
			sessions(30)
			require.GreaterOrEqual(t, sb.spares.hits.Load()-hits, int64(30), "the runs were launched on the spares")
			assert.LessOrEqual(t, count()-before, 4, "descriptors kept after 30 sessions (before %d)", before)
		})
	}
}
