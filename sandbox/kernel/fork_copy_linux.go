// SPDX-License-Identifier: MIT

//go:build linux && !amd64

package kernel

import (
	"errors"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stepPlain is not a failure: the copying fork's child reports with it that it installed
// the plain filter (the vfork's child says so in memory it shares).
const stepPlain = 7

// forkExec forks c without CLONE_VM (a copy of this process: no stack of its own is
// needed, at the cost of copying the page tables) and waits on a pipe until it exec'd.
func forkExec(args cloneArgs, path *byte, argv, envv []*byte, c *ExecChild, nofile *unix.Rlimit, cs *childSeccomp) (forkResult, syscall.Errno) {
	res := forkResult{pid: -1, pidfd: -1}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return res, err.(syscall.Errno)
	}
	var procs *int
	if len(c.CgroupProcs) > 0 {
		procs = &c.CgroupProcs[0]
	}
	stdio := c.Stdio
	pid, pfd, errno := forkExecChild(&args, path, &argv[0], &envv[0], &stdio, procs, len(c.CgroupProcs), nofile, p[1], c.Landlock, uintptr(c.LandlockFlags), cs)
	unix.Close(p[1])
	if errno != 0 {
		unix.Close(p[0])
		return res, errno
	}
	res.pid, res.pidfd = pid, pfd
	// Records until the execve closes the pipe: a failure ends the child; stepPlain says
	// it installed the plain filter and goes on.
	var f childFailure
	buf := (*[unsafe.Sizeof(f)]byte)(unsafe.Pointer(&f))[:]
	for {
		n, err := unix.Read(p[0], buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n < len(buf) {
			break // closed by the execve
		}
		if f.step == stepPlain && f.errno == 0 {
			res.plain = true
			continue
		}
		res.fail = f
		break
	}
	unix.Close(p[0])
	return res, 0
}

// forkExecChild is the fork. In the child it makes only raw system calls and never
// returns: Go's runtime is not usable there (one thread, copied memory, default signal
// handlers). It must not grow its stack or allocate.
//
//go:nosplit
//go:norace
func forkExecChild(args *cloneArgs, path *byte, argv, envv **byte, stdio *[3]int, procs *int, nprocs int,
	nofile *unix.Rlimit, pipe int, ruleset int, llFlags uintptr, cs *childSeccomp) (pid, pidfd int, errno syscall.Errno) {
	pfd := int32(-1)
	if args.flags&unix.CLONE_PIDFD != 0 {
		args.pidfd = uint64(uintptr(unsafe.Pointer(&pfd)))
	}
	// Every signal blocked around the fork: a signal (Go's preemption) arriving while the
	// kernel copies the process restarts the clone3 (ERESTARTNOINTR), the copy made again.
	all, old := ^uint64(0), uint64(0)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	r, _, e := syscall.RawSyscall6(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0, 0, 0, 0)
	if e != 0 || r != 0 {
		syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
		if e != 0 {
			return -1, -1, e
		}
		return int(r), int(pfd), 0
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
	// The command's Landlock domain: made here, not on the forking thread (see
	// ExecChild.Landlock).
	if ruleset >= 0 {
		if _, _, e = syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), llFlags, 0); e != 0 {
			fail.step = 6
			goto failed
		}
	}
	if cs != nil {
		// The command's seccomp filter, last (see ExecChild.Seccomp).
		fail.step = 5
		r, _, e = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(cs.flags), uintptr(unsafe.Pointer(&cs.prog)))
		switch {
		case e == unix.EBUSY && cs.hasPl:
			if _, _, e = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&cs.plain))); e != 0 {
				goto failed
			}
			plain := childFailure{step: stepPlain}
			syscall.RawSyscall(unix.SYS_WRITE, uintptr(pipe), uintptr(unsafe.Pointer(&plain)), unsafe.Sizeof(plain))
		case e != 0:
			goto failed
		case cs.cmsgFD != nil:
			*cs.cmsgFD = int32(r)
			if _, _, e = syscall.RawSyscall(unix.SYS_SENDMSG, uintptr(cs.sock), uintptr(unsafe.Pointer(&cs.msg)), unix.MSG_NOSIGNAL); e != 0 {
				goto failed
			}
		}
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
