// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The clone3 gate. The filter answers clone3 with ENOSYS (its flags are in memory, so
// namespace flags cannot be checked; libc falls back to clone). But the thread launcher
// installs the filter on its own thread and then forks the child, and on cgroup v2 that
// fork must be a clone3: CLONE_INTO_CGROUP, which puts the child in its cgroup before it
// runs a single instruction, exists only there. A gated filter therefore sends clone3 to a
// seccomp user-notification listener, which the host hands to its watchdog process: the
// launch thread's own clone3 is let through (SECCOMP_USER_NOTIF_FLAG_CONTINUE; the thread
// is fledge's code, its flags are fledge's), every other caller gets ENOSYS. Once the
// listener is closed, the kernel answers every later clone3 under the filter with ENOSYS
// by itself, exactly as the ungated filter does.

// seccompNotif and seccompNotifResp mirror struct seccomp_notif / seccomp_notif_resp
// (include/uapi/linux/seccomp.h); x/sys has the ioctl numbers but not the structs.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  struct {
		Nr                 int32
		Arch               uint32
		InstructionPointer uint64
		Args               [6]uint64
	}
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// ErrGateTimeout: no clone3 reached the gate in time (the launch failed before its fork).
var ErrGateTimeout = errors.New("seccomp gate: no clone3 from the launch thread")

// InstallGatedFilter installs f with clone3 gated (f.GateClone3 is implied) on the calling
// thread and returns the listener fd (close-on-exec). The caller hands it to another
// process that runs AnswerClone3, and closes its own copy before it forks.
func InstallGatedFilter(f Filter) (int, error) {
	if !SeccompSupported() {
		return -1, ErrSeccompArch
	}
	f.GateClone3 = true
	return install(f, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
}

// AnswerClone3 waits up to timeout for clone3 notifications on listener: the one from
// thread tid continues (and AnswerClone3 returns nil), any other is answered ENOSYS. It
// must run outside the launching process's Go scheduler (the host-death watchdog runs
// it): the launching thread sits in Go's raw vfork while it waits, which a stop-the-world
// in the same process would wait for in turn. It returns ErrGateTimeout when the filter
// lost all its users (the launch failed before its fork) or the time is up.
func AnswerClone3(listener, tid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return ErrGateTimeout
		}
		fds := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("seccomp gate: poll: %w", err)
		}
		if n == 0 {
			continue
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return ErrGateTimeout // nothing runs under the filter any more
			}
			continue
		}
		ours, err := AnswerClone3Ready(listener, tid)
		if err != nil {
			return err
		}
		if ours {
			return nil
		}
	}
}

// AnswerClone3Ready receives and answers one notification on listener, which poll has
// reported readable: thread tid's clone3 continues (true), any other caller's gets ENOSYS.
// A notification withdrawn before it could be answered is not an error (false): the
// caller's clone3 comes again as a new one. It never blocks for long, so a watchdog can
// serve the gates of several launches at once from one poll loop: served one after
// another, a launch thread stuck behind another's pending clone3 (a stop-the-world waits
// for the thread in raw vfork, and every other goroutine waits for the stop-the-world)
// held up the gate in front of it until its timeout, and its own clone3 then got ENOSYS.
func AnswerClone3Ready(listener, tid int) (bool, error) {
	var req seccompNotif // must be zeroed for NOTIF_RECV
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); errno != 0 {
		if errno == unix.EINTR || errno == unix.ENOENT || errno == unix.EAGAIN {
			return false, nil // the caller died or the notification was withdrawn
		}
		return false, fmt.Errorf("seccomp gate: recv: %w", errno)
	}
	resp := seccompNotifResp{ID: req.ID}
	ours := int(req.Pid) == tid && int(req.Data.Nr) == unix.SYS_CLONE3
	switch {
	case ours:
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	case int(req.Data.Nr) == unix.SYS_CLONE3:
		resp.Error = -int32(unix.ENOSYS)
	default:
		// The filter also notifies refusals (Filter.Notify) and traced calls (Trace):
		// until the listener is back with the host, they get the answer the host would
		// give, unrecorded (the child can reach them only in the moment between its
		// fork and this gate's hand-back).
		if int(req.Data.Nr) == unix.SYS_CONNECT {
			// Filter.ConnectCheck: a connect is made by the host's listener only; the
			// launch thread, the one caller here, makes none.
			resp.Error = -int32(unix.EACCES)
		} else if _, errno := verdict(int(req.Data.Nr), req.Data.Args); errno != 0 {
			resp.Error = -int32(errno)
		} else {
			resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))); errno != 0 {
		if errno == unix.ENOENT {
			// Withdrawn: a signal (SIGCHLD, Go's preemption) interrupted the caller's wait
			// after we received it. The kernel restarts the clone3 (Go's handlers are
			// SA_RESTART), which arrives as a new notification: the gate must stay open
			// for it, or the restarted clone3 of the launch thread gets ENOSYS.
			return false, nil
		}
		return false, fmt.Errorf("seccomp gate: send: %w", errno)
	}
	return ours, nil
}
