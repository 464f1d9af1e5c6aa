// SPDX-License-Identifier: MIT

package kernel

import (
	"fmt"
	"runtime"
	"syscall"

	"unsafe"

	"golang.org/x/sys/unix"
)

// ForkExecParent starts a program as a sibling of the calling process: the child of the
// caller's parent (CLONE_PARENT), born in its cgroup (CLONE_INTO_CGROUP), with the calling
// thread's confinement (namespaces, Landlock, seccomp, capabilities), and handed over as a
// pidfd. The session's launcher uses it so that the host stays every command's parent:
// its Wait, reaping and tree kill stay as they are.
//
// Go's syscall.ForkExec cannot do it: it forks with clone3 and exit signal SIGCHLD, which
// the kernel refuses together with CLONE_PARENT (the parent's exit signal is inherited). So
// the child is forked here without CLONE_VM (a copy of this process, which runs no Go code
// but raw system calls) and with CLONE_CLEAR_SIGHAND (no Go signal handler can run in it).
// Before execve it joins the v1 groups (the unified one it was born in), takes its stdio,
// a session of its own and its rlimits: RLIMIT_CORE 0 and RLIMIT_NOFILE are in force from
// the program's first instruction.

// ExecChild describes the child of ForkExecParent and ForkExecChild.
type ExecChild struct {
	Path string
	Argv []string
	Env  []string
	// Stdio are the fds that become 0, 1 and 2 (each at least 3).
	Stdio [3]int
	// CgroupFD is the unified group to be born in (-1: the caller's).
	CgroupFD int
	// CgroupProcs are v1 cgroup.procs files (fds) the child joins before execve.
	CgroupProcs []int
	// Landlock is a ruleset fd the child restricts itself with (landlock_restrict_self,
	// LandlockFlags) after its rlimits and before its seccomp filter; -1: none. Restricted
	// there, the calling thread never is in the command's domain, which Landlock's signal
	// scope lets the command signal.
	Landlock      int
	LandlockFlags uint32
	// NoFile bounds RLIMIT_NOFILE (soft and hard, at most the caller's hard limit).
	NoFile uint64
	// Seccomp is the command's filter (nil: none), installed by the child as its last step
	// before execve: the caller's thread never carries it, so its own clone3 is never refused.
	// With Listener the filter is installed with a notification listener, which the child
	// sends (message "l", SCM_RIGHTS) to ListenerTo; where an enclosing filter has the
	// listener already (EBUSY) it installs Plain instead and sends nothing.
	Seccomp    *Filter
	Listener   bool
	Plain      *Filter
	ListenerTo int
}

// ExecChildError: the child was forked but could not exec (or join a group, or take its
// stdio); it exited with status 127 and is the caller's parent's to reap.
type ExecChildError struct {
	Step  string
	Errno unix.Errno
}

func (e *ExecChildError) Error() string { return e.Step + ": " + e.Errno.Error() }

func (e *ExecChildError) Unwrap() error { return e.Errno }

// cloneArgs mirrors struct clone_args (include/uapi/linux/sched.h, CLONE_ARGS_SIZE_VER2).
type cloneArgs struct {
	flags uint64
	pidfd uint64
	//lint:ignore U1000 the kernel reads it: the layout is struct clone_args
	childTID uint64
	//lint:ignore U1000 the kernel reads it: the layout is struct clone_args
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	//lint:ignore U1000 the kernel reads it: the layout is struct clone_args
	tls uint64
	//lint:ignore U1000 the kernel reads it: the layout is struct clone_args
	setTID uint64
	//lint:ignore U1000 the kernel reads it: the layout is struct clone_args
	setTIDSize uint64
	cgroup     uint64
}

// childFailure is what a failed child writes to the parent's pipe: its step and errno.
type childFailure struct {
	step  uint32
	errno uint32
}

var childSteps = [...]string{"cgroup", "stdio", "setsid", "rlimit", "exec", "seccomp", "landlock"}

// childSeccomp is the filter a child installs and where its listener goes, in memory the
// child reads (heap: it does not move).
type childSeccomp struct {
	flags  uint64
	prog   unix.SockFprog
	plain  unix.SockFprog
	hasPl  bool
	sock   int
	msg    unix.Msghdr
	iov    unix.Iovec
	data   [1]byte
	oob    []byte
	cmsgFD *int32
	progs  [2][]unix.SockFilter
}

// newChildSeccomp builds c's filters and its listener message (nil: no filter).
func newChildSeccomp(c *ExecChild) (*childSeccomp, error) {
	if c.Seccomp == nil {
		return nil, nil
	}
	cs := &childSeccomp{sock: -1}
	prog, err := program(*c.Seccomp)
	if err != nil {
		return nil, err
	}
	cs.progs[0] = prog
	cs.prog = unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if c.Listener {
		cs.flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
		cs.sock = c.ListenerTo
		if c.Plain != nil {
			plain, err := program(*c.Plain)
			if err != nil {
				return nil, err
			}
			cs.progs[1] = plain
			cs.plain = unix.SockFprog{Len: uint16(len(plain)), Filter: &plain[0]}
			cs.hasPl = true
		}
		cs.data[0] = 'l'
		cs.oob = unix.UnixRights(0)
		cs.cmsgFD = (*int32)(unsafe.Pointer(&cs.oob[unix.CmsgLen(0)]))
		cs.iov.Base = &cs.data[0]
		cs.iov.SetLen(1)
		cs.msg.Iov = &cs.iov
		cs.msg.SetIovlen(1)
		cs.msg.Control = &cs.oob[0]
		cs.msg.SetControllen(len(cs.oob))
	}
	return cs, nil
}

// ForkExecParent forks and execs c from the calling (confined, locked) thread and returns a
// pidfd of the child. It waits until the child has exec'd: an *ExecChildError means the
// child exists but ran nothing (the pidfd is still returned, so its parent can reap it).
func ForkExecParent(c *ExecChild) (pidfd int, err error) {
	_, pidfd, _, err = forkExecWith(c, unix.CLONE_PARENT|unix.CLONE_PIDFD, 0)
	return pidfd, err
}

// ForkExecChild forks and execs c from the calling (confined, locked) thread as a child
// of the calling process (exit signal SIGCHLD: an ordinary child, for Wait) and returns
// its pid. The child takes the same steps as ForkExecParent's, in the same order, before
// execve, so the thread that forks it never holds the command's Landlock domain or seccomp
// filter and the command's rlimits are in force from its first instruction. It waits
// until the child has exec'd: an *ExecChildError means the child exists (pid) but ran
// nothing, and is the caller's to reap. listenerLost says the child installed c.Plain
// instead of c.Seccomp (an enclosing filter holds the listener) and sent none.
func ForkExecChild(c *ExecChild) (pid int, listenerLost bool, err error) {
	pid, _, listenerLost, err = forkExecWith(c, 0, uint64(unix.SIGCHLD))
	return pid, listenerLost, err
}

// forkExecWith is the fork of both: flags are added to the child's own, exitSignal is
// clone3's exit_signal.
func forkExecWith(c *ExecChild, flags, exitSignal uint64) (pid, pidfd int, listenerLost bool, err error) {
	path, err := syscall.BytePtrFromString(c.Path)
	if err != nil {
		return -1, -1, false, err
	}
	argv, err := syscall.SlicePtrFromStrings(c.Argv)
	if err != nil {
		return -1, -1, false, err
	}
	envv, err := syscall.SlicePtrFromStrings(c.Env)
	if err != nil {
		return -1, -1, false, err
	}
	for _, fd := range c.Stdio {
		if fd < 3 {
			return -1, -1, false, fmt.Errorf("stdio fd %d below 3", fd)
		}
	}
	var hard unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &hard); err != nil {
		return -1, -1, false, fmt.Errorf("nofile: %w", err)
	}
	nofile := unix.Rlimit{Cur: min(c.NoFile, hard.Max), Max: min(c.NoFile, hard.Max)}
	args := cloneArgs{flags: flags | unix.CLONE_CLEAR_SIGHAND, exitSignal: exitSignal}
	if c.CgroupFD >= 0 {
		args.flags |= unix.CLONE_INTO_CGROUP
		args.cgroup = uint64(c.CgroupFD)
	}
	cs, err := newChildSeccomp(c)
	if err != nil {
		return -1, -1, false, fmt.Errorf("seccomp: %w", err)
	}
	r, errno := forkExec(args, path, argv, envv, c, &nofile, cs)
	runtime.KeepAlive(cs)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	runtime.KeepAlive(c)
	if errno != 0 {
		return -1, -1, false, fmt.Errorf("clone3: %w", errno)
	}
	if r.fail.errno == 0 {
		return r.pid, r.pidfd, r.plain, nil
	}
	step := "exec"
	if int(r.fail.step) < len(childSteps) {
		step = childSteps[r.fail.step]
	}
	return r.pid, r.pidfd, r.plain, &ExecChildError{Step: step, Errno: unix.Errno(r.fail.errno)}
}

// forkResult is what forkExec reports: the child's pid and pidfd (-1 unless asked for),
// whether it installed the plain filter, and its failure (errno 0: it exec'd).
type forkResult struct {
	pid, pidfd int
	plain      bool
	fail       childFailure
}
