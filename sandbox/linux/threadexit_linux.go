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
// before exit_notify in do_exit). The pidfd is waited for in the netpoller, so no thread of
// the host blocks on it (a goroutine blocked in poll(2) keeps its P until the scheduler
// takes it back, and the goroutine it just woke, the caller of Wait, waits with it). On
// older kernels the thread migrates out as before.

// pidfdThread is PIDFD_THREAD (include/uapi/linux/pidfd.h: O_EXCL).
const pidfdThread = unix.O_EXCL

// openThreadExit returns a pidfd of the calling thread, readable once it has exited (nil:
// the kernel has no thread pidfds, or off, the thread must leave its groups itself).
func openThreadExit(off bool) *os.File {
	if off {
		return nil
	}
	fd, err := unix.PidfdOpen(unix.Gettid(), pidfdThread|unix.O_NONBLOCK)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "launch thread")
}

// watchThreadExit closes left once the thread of exit has exited.
func watchThreadExit(exit *os.File, left chan struct{}) {
	defer close(left)
	rc, err := exit.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0 || (err != nil && err != unix.EINTR)
		})
	}
	if err != nil {
		// Not in the netpoller after all, or closed: wait the plain way (bounded).
		threadGone(exit, leaveWait)
	}
}

// threadGone waits up to wait for the thread of exit to have exited.
func threadGone(exit *os.File, wait time.Duration) bool {
	rc, err := exit.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	deadline := time.Now().Add(wait)
	// Control holds the fd: a concurrent Close takes effect only after it returns.
	_ = rc.Control(func(fd uintptr) {
		for {
			ms := int(time.Until(deadline) / time.Millisecond)
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, max(ms, 0))
			if err == unix.EINTR && time.Now().Before(deadline) {
				continue
			}
			gone = err == nil && n > 0
			return
		}
	})
	return gone
}
