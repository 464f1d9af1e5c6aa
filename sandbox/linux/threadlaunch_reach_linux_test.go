// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// hostThreadsProgram signals the threads of fledge (its parent, argv[1]) from its first
// instruction on, for a bounded number of rounds: every thread /proc lists and the next
// few numbers after the highest (a thread made while the command starts), each by every
// route there is: kill and tgkill with the thread's id, a thread pidfd (PIDFD_THREAD) and a
// pidfd of the process. It probes with signal 0 and, where that worked, sends SIGURG (a
// real signal Go's runtime takes in its stride) by the same route. It prints one line per
// route that worked and exits 0.
const hostThreadsProgram = `#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PIDFD_THREAD 0200000
static int tgid, hits;
static char seen[4][64];
static void note(const char *route, int tid, int sig) {
	char line[64];
	snprintf(line, sizeof line, "%s %d", route, sig);
	for (int i = 0; i < 4; i++) if (seen[i][0] && !__builtin_strcmp(seen[i], line)) return;
	for (int i = 0; i < 4; i++) if (!seen[i][0]) { __builtin_strcpy(seen[i], line); break; }
	printf("reached %s (thread %d)\n", line, tid);
	hits++;
}
static void try(int tid) {
	if (tid == getpid()) return;
	if (syscall(SYS_kill, tid, 0) == 0) {
		note("kill", tid, 0);
		if (syscall(SYS_kill, tid, SIGURG) == 0) note("kill", tid, SIGURG);
	}
	if (syscall(SYS_tgkill, tgid, tid, 0) == 0) {
		note("tgkill", tid, 0);
		if (syscall(SYS_tgkill, tgid, tid, SIGURG) == 0) note("tgkill", tid, SIGURG);
	}
	int fd = syscall(SYS_pidfd_open, tid, tid == tgid ? 0 : PIDFD_THREAD);
	if (fd >= 0) {
		if (syscall(SYS_pidfd_send_signal, fd, 0, NULL, 0) == 0) {
			note("pidfd", tid, 0);
			if (syscall(SYS_pidfd_send_signal, fd, SIGURG, NULL, 0) == 0) note("pidfd", tid, SIGURG);
		}
		close(fd);
	}
}
int main(int argc, char **argv) {
	char path[64];
	tgid = atoi(argv[1]);
	snprintf(path, sizeof path, "/proc/%d/task", tgid);
	for (int round = 0; round < 300 && hits < 4; round++) {
		int top = tgid;
		DIR *d = opendir(path);
		if (d) {
			struct dirent *e;
			while ((e = readdir(d))) {
				int tid = atoi(e->d_name);
				if (tid <= 0) continue;
				if (tid > top) top = tid;
				try(tid);
			}
			closedir(d);
		}
		for (int g = 1; g <= 4; g++) try(top + g);
	}
	return 0;
}
`

// buildStatic compiles src (C) into dir/name as a static program (skipped without gcc).
func buildStatic(t *testing.T, dir, name, src string) string {
	t.Helper()
	_, err := exec.LookPath("gcc")
	testutil.SkipUnlessSupported(t, err == nil, "needs gcc for a static test program")
	c := filepath.Join(t.TempDir(), name+".c")
	require.NoError(t, os.WriteFile(c, []byte(src), 0o644))
	bin := filepath.Join(dir, name)
	out, err := exec.Command("gcc", "-O2", "-static", "-o", bin, c).CombinedOutput()
	testutil.SkipUnlessSupported(t, err == nil, "gcc -static: "+string(out))
	return bin
}

// TestLaunchThreadUnreachableWithoutPidNS: without a pid namespace a command of the thread
// launcher sees fledge's own threads, the one that forked it among them. That thread is
// never in the command's Landlock domain (the child makes the domain itself), so a
// command that signals fledge's threads from its first instruction, by kill, tgkill, a
// thread pidfd or a process pidfd, with signal 0 or a real one, reaches none of them in
// 100 runs.
func TestLaunchThreadUnreachableWithoutPidNS(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{Launch: LaunchThread, DisablePidNS: true, DisableLauncher: true})
	testutil.SkipUnlessSupported(t, sb.LandlockABI() >= 6, "signal scoping needs Landlock ABI 6")
	e := newEnv(t)
	bin := buildStatic(t, e.project, "k", hostThreadsProgram)
	reached := 0
	for i := range 100 {
		spec := e.spec("")
		spec.Path = bin
		spec.Args = []string{"k", strconv.Itoa(os.Getpid())}
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		if out != "" {
			reached++
			t.Logf("run %d: %s", i, strings.TrimSpace(out))
		}
	}
	assert.Zero(t, reached, "a command signalled a thread of fledge's own process")
}

// rlimitProgram prints RLIMIT_NOFILE's soft and hard limits and RLIMIT_CORE's soft limit,
// read as the program's first instruction.
const rlimitProgram = `#include <stdio.h>
#include <sys/resource.h>
int main(void) {
	struct rlimit n, c;
	getrlimit(RLIMIT_NOFILE, &n);
	getrlimit(RLIMIT_CORE, &c);
	printf("%llu %llu %llu\n", (unsigned long long)n.rlim_cur, (unsigned long long)n.rlim_max, (unsigned long long)c.rlim_cur);
	return 0;
}
`

// TestThreadLauncherRlimitsFromFirstInstruction: a command launched from a thread of
// fledge has its RLIMIT_NOFILE and RLIMIT_CORE from its first instruction: not one of 100
// commands (a static program that reads them first, and the shell's ulimit) sees the
// host's limits.
func TestThreadLauncherRlimitsFromFirstInstruction(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLauncher: true})
	e := newEnv(t)
	bin := buildStatic(t, e.project, "rl", rlimitProgram)
	var host unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &host))
	require.NotEqual(t, uint64(321), host.Cur, "the host's limit must differ from the run's")
	wrong := 0
	for i := range 100 {
		spec := e.spec("")
		spec.Path, spec.Args = bin, []string{"rl"}
		if i%2 == 1 {
			spec = e.spec(`ulimit -n; ulimit -Hn; ulimit -c`)
		}
		spec.Limits.NoFile = 321
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		if got := strings.Fields(out); !assert.Equal(t, []string{"321", "321", "0"}, got, "run %d (the host's soft limit is %d)", i, host.Cur) {
			wrong++
		}
	}
	assert.Zero(t, wrong, "runs that saw other limits")
}
