// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// launcherProbe is run by python3 inside a command or a plugin process, with the
// launcher's pid (in the run's pid namespace) as its argument. It prints one line per way
// in that worked, then "done". Each attempt is one system call: nothing waits.
const launcherProbe = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
p = int(sys.argv[1])
SYS_pidfd_open, SYS_pidfd_send_signal, SYS_tgkill, SYS_setns = 434, 424, 234, 308
try:
    tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % p))
except OSError:
    tids = [p]
pfd = libc.syscall(SYS_pidfd_open, p, 0)
if pfd >= 0:
    for sig in (0, 15, 9, 19):
        if libc.syscall(SYS_pidfd_send_signal, pfd, sig, None, 0) == 0:
            print("pidfd signal %d" % sig)
for t in tids:
    for sig in (0, 10, 19):
        if libc.syscall(SYS_tgkill, p, t, sig) == 0:
            print("tgkill %d" % sig)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
remote = iovec(0x400000, 64)
libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
r = libc.process_vm_readv(p, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
if r > 0 or ctypes.get_errno() not in (1, 13, 3):
    print("process_vm_readv %d errno %d" % (r, ctypes.get_errno()))
for ns in ("mnt", "net", "ipc", "pid", "cgroup", "uts", "user", "time"):
    try:
        fd = os.open("/proc/%d/ns/%s" % (p, ns), os.O_RDONLY)
    except OSError:
        continue
    print("opened ns %s" % ns)
    if libc.syscall(SYS_setns, fd, 0) == 0:
        print("setns %s" % ns)
for t in tids:
    base = "/proc/%d/task/%d/" % (p, t)
    for f in ("environ", "mem", "auxv", "syscall", "stack", "maps", "fdinfo/0", "io"):
        try:
            with open(base + f, "rb") as fh:
                fh.read(16)
            print("read task %s" % f)
        except OSError:
            pass
    try:
        # The numbers can be listed (both are uid 0, as for the holder); the files not.
        for n in os.listdir(base + "fd"):
            try:
                os.close(os.open(base + "fd/" + n, os.O_RDONLY | os.O_NONBLOCK))
                print("opened task fd %s" % n)
            except OSError:
                pass
    except OSError:
        pass
    for d in ("map_files", "root", "cwd"):
        try:
            os.listdir(base + d)
            print("listed task %s" % d)
        except OSError:
            pass
for f in ("fdinfo/0", "map_files", "io", "pagemap", "timerslack_ns"):
    try:
        if f == "map_files":
            os.listdir("/proc/%d/%s" % (p, f))
        else:
            with open("/proc/%d/%s" % (p, f), "rb") as fh:
                fh.read(16)
        print("read %s" % f)
    except OSError:
        pass
try:
    fd = os.open("/proc/%d/fd/0" % p, os.O_RDWR)
    print("opened socket")
except OSError:
    pass
if libc.ptrace(16, p, 0, 0) == 0:
    print("attached")
if libc.ptrace(0x4206, p, 0, 0) == 0:
    print("seized")
print("done")
`

// TestLauncherUnreachableFromCommandAndPlugin: neither a command launched by the session's
// launcher nor the session's plugin process (both in its pid namespace) can signal any
// of the launcher's threads (also through a pidfd), read its memory (process_vm_readv,
// /proc/<pid>/task/*/mem), its descriptors' details, mapped files or io counters, open its
// namespaces or enter them, or trace it; the launcher goes on serving.
func TestLauncherUnreachableFromCommandAndPlugin(t *testing.T) {
	testutil.RequireContained(t)
	_, err := exec.LookPath("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the probe")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.LandlockABI() >= 6, "signal scoping needs Landlock ABI 6")
	e := newEnv(t)
	l := withLauncher(t, sb, e)
	lp := strconv.Itoa(nsPid(t, l.proc.Pid))
	for _, kind := range []sandbox.Kind{sandbox.KindExec, sandbox.KindPlugin} {
		before := sb.launchers.served.Load()
		spec := e.spec(`exec /usr/bin/python3 -c "$1" "$0"`, lp, launcherProbe)
		spec.Kind = kind
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s: %s%s", kind, out, errOut)
		assert.Equal(t, "done\n", out, "%s reached the launcher (pid %s in the namespace)", kind, lp)
		if kind == sandbox.KindExec {
			assert.Equal(t, before+1, sb.launchers.served.Load(), "the command did not go through the launcher")
		}
		require.True(t, l.alive(), "the launcher died")
	}
	before := sb.launchers.served.Load()
	res, out, errOut := run(t, sb, e.spec(`echo ok`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the launcher stopped serving")
}

// TestLauncherCommandHoldsNothing: a command launched by the session's launcher has no
// capability in any set, no_new_privs, its seccomp filter, and no descriptor but its
// stdio (the launcher's request socket, its spare threads' and other runs' descriptors
// never reach it).
func TestLauncherCommandHoldsNothing(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root to prove capabilities are dropped")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	before := sb.launchers.served.Load()
	res, out, errOut := run(t, sb, e.spec(`grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status; for f in /proc/self/fd/*; do t=$(readlink "$f") && echo "fd ${f##*/} $t"; done; true`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the run did not go through the launcher")
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		assert.Contains(t, out, set+":\t0000000000000000\n", "the command holds capabilities")
	}
	assert.Contains(t, out, "NoNewPrivs:\t1\n")
	if kernel.SeccompSupported() {
		assert.Contains(t, out, "Seccomp:\t2\n")
	}
	var fds []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "fd "); ok {
			fds = append(fds, rest)
		}
	}
	// 0-2 are the run's stdio; the glob's own directory descriptor is gone by the time
	// readlink looks at it.
	require.Len(t, fds, 3, "descriptors beyond stdio reached the command: %v", fds)
	for i, f := range fds {
		assert.True(t, strings.HasPrefix(f, fmt.Sprintf("%d ", i)), "fd %q", f)
		assert.NotContains(t, f, "socket", "a socket reached the command as stdio: %v", fds)
	}
}

// launcherTids are the launcher's thread ids in its pid namespace.
func launcherTids(t *testing.T, pid int) []string {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	var tids []string
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				tids = append(tids, f[len(f)-1])
			}
		}
	}
	return tids
}

// TestLaunchingThreadUnreachable: the launcher's thread that forked a command is in no
// Landlock domain the command can signal. A command that signals the launcher's threads
// from its first instruction (a static program given their ids) reaches none of them, in
// 100 runs; the launcher stays up and serving.
func TestLaunchingThreadUnreachable(t *testing.T) {
	testutil.RequireContained(t)
	_, err := exec.LookPath("gcc")
	testutil.SkipUnlessSupported(t, err == nil, "needs gcc for the signalling program")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.LandlockABI() >= 6, "signal scoping needs Landlock ABI 6")
	e := newEnv(t)
	// In the project (read-write, so also executable): the same grants as the session's
	// other runs, so the same view and launcher.
	bin := e.project
	src := filepath.Join(t.TempDir(), "k.c")
	require.NoError(t, os.WriteFile(src, []byte(tgkillProgram), 0o644))
	out, err := exec.Command("gcc", "-O2", "-static", "-o", filepath.Join(bin, "k"), src).CombinedOutput()
	testutil.SkipUnlessSupported(t, err == nil, "gcc -static: "+string(out))
	l := withLauncher(t, sb, e)
	lp := strconv.Itoa(nsPid(t, l.proc.Pid))
	reached, failed := 0, 0
	for range 100 {
		spec := e.spec("")
		spec.Path = filepath.Join(bin, "k")
		spec.Args = append([]string{"k", lp}, launcherTids(t, l.proc.Pid)...)
		// Both streams into one buffer: two copying goroutines write it.
		var out testutil.SyncBuffer
		spec.Stdout, spec.Stderr = &out, &out
		before := sb.launchers.served.Load()
		p, err := sb.Start(context.Background(), spec)
		if err != nil {
			// The launcher died under the launch (its thread was killed before it
			// answered).
			failed++
			t.Logf("start: %v", err)
			break
		}
		res := waitFor(t, p)
		require.Equal(t, 0, res.ExitCode, "%s", out.String())
		require.Equal(t, before+1, sb.launchers.served.Load(), "the run did not go through the launcher")
		if out.String() != "" {
			reached++
			t.Logf("%s", out.String())
		}
		if !l.alive() {
			break
		}
	}
	assert.Zero(t, failed, "a launch failed")
	assert.Zero(t, reached, "a command signalled the launcher's threads")
	assert.True(t, l.alive(), "a command killed the launcher")
}

// tgkillProgram signals (0, then SIGKILL on success) the threads of argv[1] whose ids
// follow, from its first instruction on, for a bounded number of rounds.
const tgkillProgram = `#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
	int tgid = atoi(argv[1]), n = argc - 2, hit = 0;
	for (int round = 0; round < 2000 && !hit; round++)
		for (int i = 0; i < n; i++)
			if (syscall(SYS_tgkill, tgid, atoi(argv[i + 2]), 0) == 0) { hit = atoi(argv[i + 2]); break; }
	if (hit) { syscall(SYS_tgkill, tgid, hit, SIGKILL); printf("reached %d\n", hit); }
	return 0;
}
`

// TestLauncherHoldsOnlyItsCapabilities: the launcher keeps only the capabilities its
// launches use (mounts and namespaces, dropping the bounding set, paths of other users,
// its groups): none of its threads has, in any set, one to load modules, trace or signal
// other processes, raw I/O, BPF, perf, device nodes, uid changes, file capabilities,
// the clock, reboot or the audit's configuration. Its commands still run.
func TestLauncherHoldsOnlyItsCapabilities(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root: the launcher runs as root only")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	l := withLauncher(t, sb, e)
	forbidden := map[string]int{"CAP_KILL": unix.CAP_KILL, "CAP_SETUID": unix.CAP_SETUID,
		"CAP_SYS_MODULE": unix.CAP_SYS_MODULE, "CAP_SYS_RAWIO": unix.CAP_SYS_RAWIO,
		"CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE, "CAP_SYS_BOOT": unix.CAP_SYS_BOOT,
		"CAP_SYS_TIME": unix.CAP_SYS_TIME, "CAP_MKNOD": unix.CAP_MKNOD,
		"CAP_AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "CAP_SETFCAP": unix.CAP_SETFCAP,
		"CAP_MAC_ADMIN": unix.CAP_MAC_ADMIN, "CAP_BPF": unix.CAP_BPF,
		"CAP_PERFMON": unix.CAP_PERFMON, "CAP_NET_RAW": unix.CAP_NET_RAW,
		"CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", l.proc.Pid))
	require.NoError(t, err)
	for _, ent := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", l.proc.Pid, ent.Name()))
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			set, v, ok := strings.Cut(line, ":\t")
			if !ok || !strings.HasPrefix(set, "Cap") {
				continue
			}
			mask, err := strconv.ParseUint(v, 16, 64)
			require.NoError(t, err, line)
			for name, c := range forbidden {
				assert.Zero(t, mask&(1<<c), "the launcher's thread %s holds %s in %s", ent.Name(), name, set)
			}
		}
	}
	before := sb.launchers.served.Load()
	res, out, errOut := run(t, sb, e.spec(`echo ok`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the run did not go through the launcher")
}
