// SPDX-License-Identifier: MIT

//go:build linux && amd64

package kernel

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clone3Parked runs clone3 with args; the child only sleeps (pidholder_amd64.s) until the
// caller kills it.
//
//go:noescape
func clone3Parked(args *cloneArgs) (pid uintptr, errno uintptr)

// forkUserNSMu: one ForkUserNS child at a time, so the first to end does not make fledge
// dumpable again while another's child lives.
var forkUserNSMu sync.Mutex

// ForkUserNS returns an fd of a new user namespace with the given uid_map and gid_map
// contents (setgroups denied). Only a process can make one (unshare(CLONE_NEWUSER) refuses
// a multi-threaded caller): a child is forked into it sharing this process's memory
// (CLONE_VM: no page tables copied, no exec), with every signal blocked and the default
// handlers, where it runs only a pause loop of assembly; its maps are written, its
// namespace opened, and it is killed and reaped before this returns. ErrUnsupported: not
// here (the caller makes the namespace another way).
//
// The namespace is owned by fledge's euid, and the owner of a user namespace holds every
// capability in it: any process of that uid, even one without capabilities (a root command),
// passes the capability checks of ptrace access to the child, whose memory is fledge's and
// whose fd table a copy of fledge's. A root fledge is therefore not dumpable while the child
// lives: access to its memory, /proc/PID/{mem,environ,fd,...} then needs CAP_SYS_PTRACE in
// the namespace that made fledge's memory (the host's), which such a process lacks. (A
// fledge that is not root is open to its own uid anyway: it holds no capability.)
func ForkUserNS(uidMap, gidMap string) (int, error) {
	if os.Geteuid() == 0 {
		forkUserNSMu.Lock()
		defer forkUserNSMu.Unlock()
		was, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		if err != nil {
			return -1, fmt.Errorf("%w: dumpable: %w", ErrUnsupported, err)
		}
		if was != 0 {
			if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
				return -1, fmt.Errorf("%w: dumpable: %w", ErrUnsupported, err)
			}
			// Deferred first, so it runs last: once the child is killed and reaped.
			defer func() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, uintptr(was), 0, 0, 0) }()
		}
	}
	stack := make([]byte, 512)
	args := &cloneArgs{flags: unix.CLONE_VM | unix.CLONE_NEWUSER | unix.CLONE_CLEAR_SIGHAND,
		exitSignal: uint64(unix.SIGCHLD),
		stack:      uint64(uintptr(unsafe.Pointer(&stack[0]))), stackSize: uint64(len(stack))}
	var mask uint64
	all := ^uint64(0)
	runtime.LockOSThread()
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&mask)), 8, 0, 0)
	cpid, errno := clone3Parked(args)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&mask)), 0, 8, 0, 0)
	runtime.UnlockOSThread()
	if errno != 0 {
		runtime.KeepAlive(stack)
		return -1, fmt.Errorf("%w: clone3: %w", ErrUnsupported, syscall.Errno(errno))
	}
	pid := int(cpid)
	defer func() {
		// The child sleeps on its stack until killed: reaped before the stack may go.
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		runtime.KeepAlive(stack)
	}()
	for _, w := range []struct{ file, data string }{
		{"setgroups", "deny"}, {"uid_map", uidMap}, {"gid_map", gidMap}} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, w.file), []byte(w.data), 0); err != nil {
			return -1, err
		}
	}
	return unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
}
