// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
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

// ExecChild describes the child of ForkExecParent.
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
	// NoFile bounds RLIMIT_NOFILE (soft and hard, at most the caller's hard limit).
	NoFile uint64
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
	flags      uint64
	pidfd      uint64
	childTID   uint64
	parentTID  uint64
	exitSignal uint64
	stack      uint64
	stackSize  uint64
	tls        uint64
	setTID     uint64
	setTIDSize uint64
	cgroup     uint64
}

// childFailure is what a failed child writes to the parent's pipe: its step and errno.
type childFailure struct {
	step  uint32
	errno uint32
}

var childSteps = [...]string{"cgroup", "stdio", "setsid", "rlimit", "exec"}

// ForkExecParent forks and execs c from the calling (confined, locked) thread and returns a
// pidfd of the child. It waits until the child has exec'd: an *ExecChildError means the
// child exists but ran nothing (the pidfd is still returned, so its parent can reap it).
func ForkExecParent(c *ExecChild) (pidfd int, err error) {
	path, err := syscall.BytePtrFromString(c.Path)
	if err != nil {
		return -1, err
	}
	argv, err := syscall.SlicePtrFromStrings(c.Argv)
	if err != nil {
		return -1, err
	}
	envv, err := syscall.SlicePtrFromStrings(c.Env)
	if err != nil {
		return -1, err
	}
	for _, fd := range c.Stdio {
		if fd < 3 {
			return -1, fmt.Errorf("stdio fd %d below 3", fd)
		}
	}
	var hard unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &hard); err != nil {
		return -1, fmt.Errorf("nofile: %w", err)
	}
	nofile := unix.Rlimit{Cur: min(c.NoFile, hard.Max), Max: min(c.NoFile, hard.Max)}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, fmt.Errorf("exec pipe: %w", err)
	}
	flags := uint64(unix.CLONE_PARENT | unix.CLONE_PIDFD | unix.CLONE_CLEAR_SIGHAND)
	cg := uint64(0)
	if c.CgroupFD >= 0 {
		flags |= unix.CLONE_INTO_CGROUP
		cg = uint64(c.CgroupFD)
	}
	var procs *int
	if len(c.CgroupProcs) > 0 {
		procs = &c.CgroupProcs[0]
	}
	pfd, errno := forkExecChild(flags, cg, path, &argv[0], &envv[0], &c.Stdio, procs, len(c.CgroupProcs), &nofile, p[1])
	unix.Close(p[1])
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	runtime.KeepAlive(c)
	if errno != 0 {
		unix.Close(p[0])
		return -1, fmt.Errorf("clone3: %w", errno)
	}
	var f childFailure
	buf := (*[unsafe.Sizeof(f)]byte)(unsafe.Pointer(&f))[:]
	var n int
	for {
		n, err = unix.Read(p[0], buf)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	unix.Close(p[0])
	if err != nil {
		return pfd, fmt.Errorf("exec pipe: %w", err)
	}
	if n == 0 {
		return pfd, nil // closed by the execve
	}
	step := "exec"
	if int(f.step) < len(childSteps) {
		step = childSteps[f.step]
	}
	return pfd, &ExecChildError{Step: step, Errno: unix.Errno(f.errno)}
}

// forkExecChild is the fork. In the child it makes only raw system calls and never
// returns: Go's runtime is not usable there (one thread, copied memory, default signal
// handlers). It must not grow its stack or allocate.
//
//go:nosplit
//go:norace
func forkExecChild(flags, cgroup uint64, path *byte, argv, envv **byte, stdio *[3]int, procs *int, nprocs int,
	nofile *unix.Rlimit, pipe int) (pidfd int, errno syscall.Errno) {
	pfd := int32(-1)
	args := cloneArgs{flags: flags, pidfd: uint64(uintptr(unsafe.Pointer(&pfd))), cgroup: cgroup}
	// Every signal blocked around the fork: a signal (Go's preemption) arriving while the
	// kernel copies the process restarts the clone3 (ERESTARTNOINTR), and a gate that let
	// the first one through would answer the restarted one with ENOSYS.
	all, old := ^uint64(0), uint64(0)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	r, _, e := syscall.RawSyscall6(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0, 0, 0, 0)
	if e != 0 || r != 0 {
		syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
		if e != 0 {
			return -1, e
		}
		return int(pfd), 0
	}
	// The child: its handlers are the defaults (CLONE_CLEAR_SIGHAND), so the thread's
	// own mask can come back.
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	var fail childFailure
	zero := [1]byte{'0'}
	core := unix.Rlimit{}
	for i := 0; i < nprocs; i++ {
		fd := *(*int)(unsafe.Add(unsafe.Pointer(procs), uintptr(i)*unsafe.Sizeof(*procs)))
		if _, _, e = syscall.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&zero[0])), 1); e != 0 {
			fail.step = 0
			goto failed
		}
	}
	for i := 0; i < 3; i++ {
		if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, uintptr(stdio[i]), uintptr(i), 0); e != 0 {
			fail.step = 1
			goto failed
		}
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_SETSID, 0, 0, 0); e != 0 {
		fail.step = 2
		goto failed
	}
	if _, _, e = syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CORE, uintptr(unsafe.Pointer(&core)), 0, 0, 0); e != 0 {
		fail.step = 3
		goto failed
	}
	if _, _, e = syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(nofile)), 0, 0, 0); e != 0 {
		fail.step = 3
		goto failed
	}
	_, _, e = syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(argv)), uintptr(unsafe.Pointer(envv)))
	fail.step = 4
failed:
	fail.errno = uint32(e)
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(pipe), uintptr(unsafe.Pointer(&fail)), unsafe.Sizeof(fail))
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
	}
}
