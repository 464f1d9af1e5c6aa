// SPDX-License-Identifier: MIT

package stub

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// joinCgroups moves the stub into its cgroup v1 controller groups before any untrusted code
// runs: every process the command forks later is born inside them.
func joinCgroups(procs []string) error {
	if len(procs) == 0 {
		return nil
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, p := range procs {
		if err := os.WriteFile(p, pid, 0); err != nil {
			return fmt.Errorf("join %s: %w", p, err)
		}
	}
	return nil
}

// setNoNewPrivs is per thread; MaybeRun pinned us to the thread that will exec.
func setNoNewPrivs() error { return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }

func getsid() (int, error) { return unix.Getsid(0) }

func fcntl(fd, cmd, arg int) (int, error) { return unix.FcntlInt(uintptr(fd), cmd, arg) }

// cloexecFrom marks every fd >= first close-on-exec in one syscall: the stub's own fds
// (policy, error pipe, directory, Go runtime internals) vanish at exec, and the error pipe
// still works until then. Falls back to /proc/self/fd on kernels without close_range.
func cloexecFrom(first int) error {
	if err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	return cloexecFromDir("/proc/self/fd", first)
}

// installFilter installs the seccomp filter last of all the steps; with Policy.Notify its
// listener goes to the host over fdNotify first (the stub keeps no copy: a host that is
// gone makes the kernel answer the refused calls ENOSYS, still refused).
func installFilter(pol *Policy) error {
	f := kernel.Filter{DenyUnix: pol.DenyUnix, TCPOnly: pol.TCPOnly, ConnectCheck: pol.ConnectCheck}
	if !pol.Notify && !pol.Trace {
		return kernel.InstallFilter(f)
	}
	nf := f
	nf.Notify, nf.Trace = true, pol.Trace
	l, err := kernel.InstallNotifyFilter(nf)
	if errors.Is(err, kernel.ErrListenerBusy) {
		_ = unix.Close(fdNotify)
		return kernel.InstallFilter(f)
	}
	if err != nil {
		return err
	}
	err = unix.Sendmsg(fdNotify, []byte("l"), unix.UnixRights(l), nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	_ = unix.Close(l)
	_ = unix.Close(fdNotify)
	if err != nil {
		return fmt.Errorf("hand the listener to the host: %w", err)
	}
	return nil
}
