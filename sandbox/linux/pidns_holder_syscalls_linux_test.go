// SPDX-License-Identifier: MIT

package linux

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// holderSyscallsProgram tries the system calls that reach into another process, on pid 1
// of its namespace (the holder): pidfd_getfd of its fds 0-3 through a pidfd,
// process_vm_readv of its code, PTRACE_ATTACH and PTRACE_SEIZE, and kcmp against itself.
// It prints "pid1 <cmdline>" and one line per call that worked.
const holderSyscallsProgram = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
int main(void) {
	char cmd[256] = {0};
	int c = open("/proc/1/cmdline", O_RDONLY);
	if (c >= 0) {
		ssize_t n = read(c, cmd, sizeof cmd - 1);
		for (ssize_t i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';
		close(c);
	}
	printf("pid1 %s\n", cmd);
	int pfd = syscall(SYS_pidfd_open, 1, 0);
	if (pfd >= 0) {
		for (int fd = 0; fd < 4; fd++) {
			int got = syscall(SYS_pidfd_getfd, pfd, fd, 0);
			if (got >= 0) printf("reached pidfd_getfd %d\n", fd);
		}
	}
	char buf[16];
	struct iovec local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
	if (syscall(SYS_process_vm_readv, 1, &local, 1, &remote, 1, 0) > 0) printf("reached process_vm_readv\n");
	if (ptrace(PTRACE_ATTACH, 1, 0, 0) == 0) printf("reached ptrace attach\n");
	if (ptrace(PTRACE_SEIZE, 1, 0, 0) == 0) printf("reached ptrace seize\n");
	if (syscall(SYS_kcmp, getpid(), 1, 0, 0, 0) >= 0) printf("reached kcmp\n");
	return 0;
}
`

// TestPidNamespaceHolderSyscallsRefused: the system calls that reach another process's
// fds or memory by pid or pidfd (pidfd_getfd, process_vm_readv, ptrace attach and seize,
// kcmp) all fail on the holder from a command in its namespace, with Landlock absent (its
// ptrace scoping would refuse them too). The /proc doors are
// TestPidNamespaceHolderUnreachableWithoutLandlock's.
func TestPidNamespaceHolderSyscallsRefused(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLandlock: true})
	requirePidNS(t, sb)
	e := newEnv(t)
	bin := buildStatic(t, e.project, "sc", holderSyscallsProgram)
	spec := e.spec("")
	spec.Path, spec.Args = bin, []string{"sc"}
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.True(t, strings.HasPrefix(out, "pid1 ") && strings.Contains(out, stub.PidNSMarker), "pid 1 is not the holder: %q", out)
	assert.NotContains(t, out, "reached", "a command reached the holder by a system call")
}
