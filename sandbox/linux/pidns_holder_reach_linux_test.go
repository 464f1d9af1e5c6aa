// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPidNamespaceHolderUnreachableWithoutLandlock: pid 1 of a command's namespace is the
// holder, a process of the host (its root, cwd and fds are the host's). With Landlock
// absent (a kernel whose lsm= lacks it: the run is degraded, not refused), the holder being
// not dumpable and the command having no capabilities must still keep every door of
// /proc/1 shut: root, cwd, exe, fds, map_files, mem, environ, and its threads'.
func TestPidNamespaceHolderUnreachableWithoutLandlock(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLandlock: true})
	requirePidNS(t, sb)
	e := newEnv(t)
	script := attemptScript + `tr '\0' ' ' < /proc/1/cmdline | grep -q __fledge_sandbox_pidns__ || echo PID1-NOT-HOLDER
attempt root-ls ls /proc/1/root/
attempt root-etc cat /proc/1/root/etc/hostname
attempt root-read readlink /proc/1/root
attempt cwd-ls ls /proc/1/cwd/
attempt exe-read cat /proc/1/exe
attempt fd-read sh -c 'for f in /proc/1/fd/*; do readlink "$f" && exit 0; done; exit 1'
attempt fd-open cat /proc/1/fd/0
attempt mapfiles sh -c 'ls /proc/1/map_files/ | grep -q .'
attempt mem dd if=/proc/1/mem bs=1 count=1 skip=4096
attempt environ cat /proc/1/environ
attempt task-root sh -c 'for d in /proc/1/task/*; do ls "$d/root/" && exit 0; done; exit 1'
attempt kill-holder kill -KILL 1
attempt stop-holder kill -STOP 1
echo done`
	res, out, errOut := run(t, sb, e.spec(script))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.NotContains(t, out, "PID1-NOT-HOLDER")
	requireRefused(t, out, "root-ls", "root-etc", "root-read", "cwd-ls", "exe-read", "fd-read", "fd-open", "mapfiles", "mem", "environ", "task-root")
	assert.Contains(t, out, "done\n")
	sb.pidns.mu.Lock()
	defer sb.pidns.mu.Unlock()
	for _, h := range sb.pidns.holders {
		assert.True(t, h.alive(), "the holder survives a confined command")
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.proc.Pid))
		require.NoError(t, err)
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		assert.NotEqual(t, "T", f[0], "the holder was stopped by a confined command")
	}
}
