// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A launch thread sits in its run's v1 groups (memory, pids) when it forks, so the child is
// born limited. It must be out of them before anything kills the tree with the freezer
// (a frozen thread of fledge stalls the host's every stop-the-world) or removes them.
// Moving it back to the host's groups is a cgroup migration: it takes the kernel's global
// threadgroup lock for writing, which waits for an RCU grace period (0.25 ms idle, 6 ms
// at load 18) and holds up every fork, exec and exit on the machine meanwhile, the
// command's own included. The thread dies right after anyway (it carries the child's
// confinement), and a dying thread leaves every cgroup in do_exit without that lock. So
// the thread just exits, and whatever touches the run's groups waits for its death, told
// by a pidfd of the thread (PIDFD_THREAD, Linux 6.9): it polls readable once the thread
// has exited, which is after the kernel took it out of its cgroups (cgroup_exit comes
// before exit_notify in do_exit). On older kernels the thread migrates out as before.
//
// The thread closes the run's left channel as its last act (finishLaunch), so by the time
// a waiter looks at the pidfd the thread is in its last microseconds; the waiter checks
// without blocking and sleeps between checks, so it never holds a scheduler P in a
// blocking poll (a goroutine blocked in poll(2) keeps its P until the runtime takes it
// back, and the goroutine it just woke, the caller of Wait, would wait with it).

// pidfdThread is PIDFD_THREAD (include/uapi/linux/pidfd.h: O_EXCL).
const pidfdThread = unix.O_EXCL

// openThreadExit returns a pidfd of the calling thread, readable once it has exited (nil:
// the kernel has no thread pidfds, or off, the thread must leave its groups itself).
func openThreadExit(off bool) *os.File {
	if off {
		return nil
	}
	fd, err := unix.PidfdOpen(unix.Gettid(), pidfdThread)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "launch thread")
}

// threadExited reports whether the thread of exit has exited, without waiting. A closed
// pidfd counts as exited: it is closed only by whoever already waited for that death (the
// run's cleanup, a retried launch, a released spare), and a Kill racing that cleanup would
// otherwise poll it until its bound ran out.
func threadExited(exit *os.File) bool {
	rc, err := exit.SyscallConn()
	if err != nil {
		return true // no file: nothing to wait for
	}
	gone := false
	// Control holds the fd: a concurrent Close takes effect only after it returns.
	cerr := rc.Control(func(fd uintptr) {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		gone = err == nil && n > 0
	})
	// Control fails only on a closed file ("use of closed file", not os.ErrClosed).
	return gone || cerr != nil
}

// threadGone waits up to wait for the thread of exit to have exited.
func threadGone(exit *os.File, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	delay := 20 * time.Microsecond
	for {
		if threadExited(exit) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
		delay = min(delay*2, time.Millisecond)
	}
}
