// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestKeptFullProcNotInherited: the full procfs fledge keeps for its identity lookups when
// its /proc shows processes only (subset=pid) is fledge's alone: a command, on either
// launch path, has no fd of it (it would show every process of the host, past the run's
// pid namespace). The control: fledge holds it, a procfs with /proc/sys.
func TestKeptFullProcNotInherited(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root")
	var path string
	var serr error
	// Never the main thread: the runtime keeps a locked main thread whose goroutine
	// exits (wedged, not ended), and /proc/self would then show this namespace to every
	// later test of the process.
	onDiscardedThread(func() {
		if serr = unix.Unshare(unix.CLONE_NEWNS); serr != nil {
			return
		}
		if serr = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); serr != nil {
			return
		}
		if serr = unix.Mount("proc", "/proc", "proc", unix.MS_RDONLY, "subset=pid"); serr != nil {
			return
		}
		path, serr = kernel.FullProc()
	})
	if errors.Is(serr, unix.EINVAL) {
		t.Skipf("not supported, skipping: no subset=pid here (%v)", serr)
	}
	require.NoError(t, serr)
	fdText, ok := strings.CutPrefix(path, "/proc/self/fd/")
	require.True(t, ok, "control: under subset=pid the full procfs is one of fledge's own: %s", path)
	fd, err := strconv.Atoi(fdText)
	require.NoError(t, err)
	var sfs unix.Statfs_t
	require.NoError(t, unix.Fstatfs(fd, &sfs))
	require.EqualValues(t, unix.PROC_SUPER_MAGIC, sfs.Type, "control: fledge holds the procfs")
	_, err = os.Lstat(path + "/sys/net/ipv4/tcp_fastopen_key")
	require.NoError(t, err, "control: it shows /proc/sys")
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	require.NoError(t, err)
	assert.NotZero(t, flags&unix.FD_CLOEXEC, "close-on-exec from the start")

	// Every fd the command has: only stdio and the listing's own.
	const script = `exec ` + python + ` -c 'import os; print(" ".join(sorted(os.listdir("/proc/self/fd"))))'`
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			for _, network := range []bool{false, true} {
				spec := e.spec(script)
				spec.Network = network
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
				assert.Equal(t, "0 1 2 3", strings.TrimSpace(out), "network %v: the command's fds", network)
			}
		})
	}
}
