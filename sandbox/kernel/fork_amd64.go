// SPDX-License-Identifier: MIT

//go:build linux && amd64

package kernel

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vforkSpec is what clone3VFork's child reads (fork_amd64.s: fixed offsets, checked by
// TestVForkSpecLayout). It lives on the heap, which does not move.
type vforkSpec struct {
	args   cloneArgs // 0
	procs  uintptr   // 88: *int, the v1 cgroup.procs fds
	nprocs int64     // 96
	stdio  [3]int64  // 104
	//lint:ignore U1000 the child reads it (fork_amd64.s)
	core   unix.Rlimit  // 128
	nofile unix.Rlimit  // 144
	mask   uint64       // 160: the signal mask to restore in the child
	path   uintptr      // 168
	argv   uintptr      // 176
	envv   uintptr      // 184
	fail   childFailure // 192: written by a child that could not exec
	zero   [8]byte      // 200: "0", written to cgroup.procs
	scFlag uint64       // 208: seccomp's flags
	scProg uintptr      // 216: *SockFprog, the filter (0: none)
	scPl   uintptr      // 224: *SockFprog, the filter without listener (0: none)
	scSock int64        // 232: where the listener goes (-1: nowhere)
	scMsg  uintptr      // 240: *Msghdr carrying it
	scFD   uintptr      // 248: *int32, its place in the message
	llFD   int64        // 256: the Landlock ruleset to restrict with (-1: none)
	llFl   uint64       // 264: landlock_restrict_self's flags
	plain  uint64       // 272: set to 1 by a child that installed the plain filter
}

const vforkStack = 16 << 10

// clone3VFork runs clone3 with spec.args (CLONE_VM | CLONE_VFORK and a stack of its own);
// the child runs only the assembly of fork_amd64.s. It returns when the child has exec'd
// or exited.
//
//go:noescape
func clone3VFork(spec *vforkSpec) (pid uintptr, errno uintptr)

// forkExec forks c sharing this process's memory (CLONE_VM | CLONE_VFORK, like Go's own
// fork): no page tables are copied. The child runs on a stack of its own, in assembly.
func forkExec(args cloneArgs, path *byte, argv, envv []*byte, c *ExecChild, nofile *unix.Rlimit, cs *childSeccomp) (forkResult, syscall.Errno) {
	stack := make([]byte, vforkStack)
	spec := &vforkSpec{nofile: *nofile}
	spec.zero[0] = '0'
	pfd := new(int32)
	*pfd = -1
	spec.args = args
	spec.args.flags |= unix.CLONE_VM | unix.CLONE_VFORK
	spec.args.stack, spec.args.stackSize = uint64(uintptr(unsafe.Pointer(&stack[0]))), vforkStack
	if args.flags&unix.CLONE_PIDFD != 0 {
		spec.args.pidfd = uint64(uintptr(unsafe.Pointer(pfd)))
	}
	if len(c.CgroupProcs) > 0 {
		spec.procs = uintptr(unsafe.Pointer(&c.CgroupProcs[0]))
		spec.nprocs = int64(len(c.CgroupProcs))
	}
	for i, fd := range c.Stdio {
		spec.stdio[i] = int64(fd)
	}
	spec.path = uintptr(unsafe.Pointer(path))
	spec.argv = uintptr(unsafe.Pointer(&argv[0]))
	spec.envv = uintptr(unsafe.Pointer(&envv[0]))
	spec.scSock = -1
	spec.llFD, spec.llFl = int64(c.Landlock), uint64(c.LandlockFlags)
	if cs != nil {
		spec.scFlag = cs.flags
		spec.scProg = uintptr(unsafe.Pointer(&cs.prog))
		if cs.hasPl {
			spec.scPl = uintptr(unsafe.Pointer(&cs.plain))
		}
		if cs.cmsgFD != nil {
			spec.scSock = int64(cs.sock)
			spec.scMsg = uintptr(unsafe.Pointer(&cs.msg))
			spec.scFD = uintptr(unsafe.Pointer(cs.cmsgFD))
		}
	}
	// Every signal blocked around the fork (see forkExecChild); the child restores the mask.
	all := ^uint64(0)
	runtime.LockOSThread()
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&spec.mask)), 8, 0, 0)
	pid, errno := clone3VFork(spec)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&spec.mask)), 0, 8, 0, 0)
	runtime.UnlockOSThread()
	runtime.KeepAlive(stack)
	runtime.KeepAlive(c)
	runtime.KeepAlive(path)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	runtime.KeepAlive(cs)
	if errno != 0 {
		return forkResult{pid: -1, pidfd: -1}, syscall.Errno(errno)
	}
	return forkResult{pid: int(pid), pidfd: int(*pfd), plain: spec.plain != 0, fail: spec.fail}, 0
}
