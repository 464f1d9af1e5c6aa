// SPDX-License-Identifier: MIT

//go:build linux && amd64

package kernel

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A pid-namespace holder that is not an exec of fledge. fledge forks a child (clone3 with
// CLONE_VM | CLONE_VFORK, as Go's own fork does: no page tables copied) into a new pid,
// network and mount namespace; the child runs only the assembly of pidholder_amd64.s:
// the same steps as the Go holder (sandbox/stub/pidns_linux.go), then an execve of a
// static program of 136 bytes (holderELF) from a sealed memfd. Where the Go holder costs
// an exec of fledge's 43 MB binary and a Go runtime start (3.8 ms of CPU, 5-6 ms of wall
// time per session), this one costs a fork and an exec of one page.
//
// The child, before execve (still sharing fledge's memory, so it runs no Go code):
//   - every signal stays blocked (fledge blocks them around the fork) and SIGCHLD is
//     ignored: the kernel reaps every orphan reparented to it, and no signal of its
//     namespace (where it is pid 1, which ignores what it has no handler for anyway) nor a
//     terminal's reaches it; only SIGKILL from outside its namespace ends it;
//   - a session of its own; its stdin is its end of the host's socket, fd 1 the memfd
//     (close-on-exec), every other fd of fledge closed;
//   - a detached read-only procfs of the new namespace (fsopen/fsmount), made before it
//     leaves the host's mounts (see the Go holder: "mount too revealing" otherwise);
//   - an empty read-only tmpfs as its root (pivot_root, the old root detached; chroot
//     where the root cannot be pivoted from), so /proc/1/mountinfo lists nothing of the host;
//   - the procfs sent to the host over the socket ("proc", SCM_RIGHTS), then closed.
//
// The program it execs (holderCode) makes itself not dumpable, drops every capability
// (capset to nothing), and reads its socket until the host's end closes (fledge closed
// the sandbox, or died by any signal): it then exits, and the kernel kills whatever is left
// in the namespace. It holds its socket and nothing else: no memory of fledge's, no fds,
// no capabilities, an empty root.

// holderSpec is what the child of clone3Holder reads (pidholder_amd64.s: fixed offsets,
// checked by TestHolderSpecLayout). It lives on the heap, which does not move.
type holderSpec struct {
	args   cloneArgs // 0
	sock   int64     // 88: the holder's end of the socket
	exe    int64     // 96: the memfd of holderELF
	msg    uintptr   // 104: *unix.Msghdr, "proc" with one SCM_RIGHTS fd
	msgFD  uintptr   // 112: *int32, the fd's place in the message
	argv   uintptr   // 120
	envv   uintptr   // 128
	sigIgn uintptr   // 136: *sigaction, SIG_IGN
	// 144, 148: written by a child that could not exec (-1: it did)
	failStep, failErrno int32
	strs                [8]uintptr // 152: "proc", "/", "tmpfs", "fledge-pidns", tmpfs options, "/proc", ".", ""
}

// holderSteps name the child's steps for HolderError (the child writes the index).
var holderSteps = []string{"ignore SIGCHLD", "setsid", "stdin", "program fd", "close fds",
	"procfs", "make mounts private", "mount empty root", "chdir", "pivot_root", "chroot",
	"detach the old root", "send the procfs", "execve"}

// HolderError: the holder's child failed a step before its execve; it exited with status
// 3 and is the caller's to reap.
type HolderError struct {
	Step  string
	Errno unix.Errno
}

func (e *HolderError) Error() string { return "holder: " + e.Step + ": " + e.Errno.Error() }

func (e *HolderError) Unwrap() error { return e.Errno }

// clone3Holder runs clone3 with spec.args; the child runs only the assembly of
// pidholder_amd64.s. It returns when the child has exec'd or exited.
//
//go:noescape
func clone3Holder(spec *holderSpec) (pid uintptr, errno uintptr)

// holderCode is the program the holder execs (x86-64; its source, for `as`, is in the
// comments, offsets on the left):
var holderCode = []byte{
	0x48, 0x81, 0xec, 0x80, 0x00, 0x00, 0x00, //  0: sub $128, %rsp
	0xb8, 0x9d, 0x00, 0x00, 0x00, //              7: mov $157, %eax       prctl(PR_SET_DUMPABLE, 0)
	0xbf, 0x04, 0x00, 0x00, 0x00, //              c: mov $4, %edi
	0x31, 0xf6, //                               11: xor %esi, %esi
	0x0f, 0x05, //                               13: syscall
	0x48, 0x85, 0xc0, //                         15: test %rax, %rax
	0x75, 0x62, //                               18: jnz fail
	0xc7, 0x04, 0x24, 0x22, 0x05, 0x08, 0x20, // 1a: movl $0x20080522, (%rsp)  capset: version 3,
	0xc7, 0x44, 0x24, 0x04, 0x00, 0x00, 0x00, 0x00, // 21: movl $0, 4(%rsp)     this process,
	0x48, 0xc7, 0x44, 0x24, 0x08, 0x00, 0x00, 0x00, 0x00, // 29: movq $0, 8(%rsp)  no capability
	0x48, 0xc7, 0x44, 0x24, 0x10, 0x00, 0x00, 0x00, 0x00, // 32: movq $0, 16(%rsp)
	0x48, 0xc7, 0x44, 0x24, 0x18, 0x00, 0x00, 0x00, 0x00, // 3b: movq $0, 24(%rsp)
	0xb8, 0x7e, 0x00, 0x00, 0x00, //             44: mov $126, %eax
	0x48, 0x89, 0xe7, //                         49: mov %rsp, %rdi
	0x48, 0x8d, 0x74, 0x24, 0x08, //             4c: lea 8(%rsp), %rsi
	0x0f, 0x05, //                               51: syscall
	0x48, 0x85, 0xc0, //                         53: test %rax, %rax
	0x75, 0x24, //                               56: jnz fail
	0x31, 0xc0, //                               58: loop: xor %eax, %eax  read(0, buf, 64)
	0x31, 0xff, //                               5a: xor %edi, %edi
	0x48, 0x8d, 0x74, 0x24, 0x40, //             5c: lea 64(%rsp), %rsi
	0xba, 0x40, 0x00, 0x00, 0x00, //             61: mov $64, %edx
	0x0f, 0x05, //                               66: syscall
	0x48, 0x83, 0xf8, 0xfc, //                   68: cmp $-4, %rax         EINTR: again
	0x74, 0xea, //                               6c: je loop
	0x48, 0x85, 0xc0, //                         6e: test %rax, %rax       a message: again
	0x7f, 0xe5, //                               71: jg loop
	0x31, 0xff, //                               73: xor %edi, %edi        EOF: the host is gone
	0xb8, 0xe7, 0x00, 0x00, 0x00, //             75: mov $231, %eax        exit_group(0)
	0x0f, 0x05, //                               7a: syscall
	0xbf, 0x03, 0x00, 0x00, 0x00, //             7c: fail: mov $3, %edi    exit_group(3)
	0xb8, 0xe7, 0x00, 0x00, 0x00, //             81: mov $231, %eax
	0x0f, 0x05, //                               86: syscall
}

// holderELF is holderCode as a static ELF executable: the ELF header, a PT_LOAD of the
// whole file (read and execute) and a PT_GNU_STACK (no executable stack).
func holderELF() []byte {
	const base, ehdr, phdr = 0x400000, 64, 56
	const codeAt = ehdr + 2*phdr
	b := make([]byte, codeAt, codeAt+len(holderCode))
	le := binary.LittleEndian
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1}) // 64-bit, little-endian, version 1, System V
	le.PutUint16(b[16:], 2)                       // ET_EXEC
	le.PutUint16(b[18:], 0x3e)                    // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+codeAt) // entry
	le.PutUint64(b[32:], ehdr)        // program headers
	le.PutUint16(b[52:], ehdr)
	le.PutUint16(b[54:], phdr)
	le.PutUint16(b[56:], 2)
	le.PutUint16(b[58:], 64)
	p := b[ehdr:]
	le.PutUint32(p[0:], 1) // PT_LOAD
	le.PutUint32(p[4:], 5) // PF_R | PF_X
	le.PutUint64(p[16:], base)
	le.PutUint64(p[24:], base)
	le.PutUint64(p[32:], uint64(codeAt+len(holderCode)))
	le.PutUint64(p[40:], uint64(codeAt+len(holderCode)))
	le.PutUint64(p[48:], 0x1000)
	p = b[ehdr+phdr:]
	le.PutUint32(p[0:], 0x6474e551) // PT_GNU_STACK
	le.PutUint32(p[4:], 6)          // PF_R | PF_W
	le.PutUint64(p[48:], 16)
	return append(b, holderCode...)
}

var holderExe struct {
	once sync.Once
	fd   int
	err  error
}

// holderProgram returns a sealed memfd of holderELF, made once per process (never closed:
// every holder is exec'd from it).
func holderProgram() (int, error) {
	holderExe.once.Do(func() {
		// MFD_EXEC: where vm.memfd_noexec makes memfds not executable by default; a kernel
		// older than the flag refuses it, and its memfds are executable.
		fd, err := unix.MemfdCreate("fledge-pidns", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
		if err == unix.EINVAL {
			fd, err = unix.MemfdCreate("fledge-pidns", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		}
		if err != nil {
			holderExe.fd, holderExe.err = -1, fmt.Errorf("holder program: %w", err)
			return
		}
		elf := holderELF()
		if n, err := unix.Write(fd, elf); err != nil || n != len(elf) {
			unix.Close(fd)
			holderExe.fd, holderExe.err = -1, fmt.Errorf("holder program: write: %v", err)
			return
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
			unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
			unix.Close(fd)
			holderExe.fd, holderExe.err = -1, fmt.Errorf("holder program: seal: %w", err)
			return
		}
		holderExe.fd = fd
	})
	return holderExe.fd, holderExe.err
}

// holderArg0 is the holder's argv[0]; its argv[1] is the Go holder's marker (ForkPidHolder's
// marker): ps and /proc/1/cmdline show the same process type either way.
const holderArg0 = "fledge"

// ForkPidHolder starts a pid-namespace holder with sock (one end of a SOCK_SEQPACKET
// socket pair; the caller closes its copy) as its stdin, in new pid, network and mount
// namespaces; marker is its argv[1]. It returns the holder's pid and a pidfd of it; the
// holder sends its procfs over the socket. A *HolderError: the child failed before its
// execve (reaped here). ErrUnsupported: no fast holder on this kernel (the caller starts
// the Go one).
func ForkPidHolder(sock int, marker string) (pid, pidfd int, err error) {
	exe, err := holderProgram()
	if err != nil {
		return -1, -1, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	argv0, _ := unix.BytePtrFromString(holderArg0)
	argv1, err := unix.BytePtrFromString(marker)
	if err != nil {
		return -1, -1, err
	}
	argv := []*byte{argv0, argv1, nil}
	envv := []*byte{nil}
	strs := []string{"proc", "/", "tmpfs", "fledge-pidns", "size=4k,nr_inodes=1,mode=0500", "/proc", ".", ""}
	ptrs := make([]*byte, len(strs))
	for i, s := range strs {
		ptrs[i], _ = unix.BytePtrFromString(s)
	}
	word := []byte("proc")
	iov := unix.Iovec{Base: &word[0]}
	iov.SetLen(len(word))
	oob := unix.UnixRights(-1)
	msg := &unix.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
	msg.SetControllen(len(oob))
	// struct sigaction: handler, flags, restorer, mask.
	sigIgn := &[4]uint64{1} // SIG_IGN
	stack := make([]byte, 4096)
	pfd := new(int32)
	*pfd = -1
	spec := &holderSpec{sock: int64(sock), exe: int64(exe)}
	spec.args = cloneArgs{
		flags: unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD | unix.CLONE_CLEAR_SIGHAND |
			unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWNS,
		pidfd:      uint64(uintptr(unsafe.Pointer(pfd))),
		exitSignal: uint64(unix.SIGCHLD),
		stack:      uint64(uintptr(unsafe.Pointer(&stack[0]))), stackSize: uint64(len(stack))}
	spec.msg = uintptr(unsafe.Pointer(msg))
	spec.msgFD = uintptr(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
	spec.argv = uintptr(unsafe.Pointer(&argv[0]))
	spec.envv = uintptr(unsafe.Pointer(&envv[0]))
	spec.sigIgn = uintptr(unsafe.Pointer(sigIgn))
	spec.failStep = -1
	for i, p := range ptrs {
		spec.strs[i] = uintptr(unsafe.Pointer(p))
	}
	// Every signal blocked around the fork; the holder keeps them blocked for life.
	var mask uint64
	all := ^uint64(0)
	runtime.LockOSThread()
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&mask)), 8, 0, 0)
	cpid, errno := clone3Holder(spec)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&mask)), 0, 8, 0, 0)
	runtime.UnlockOSThread()
	runtime.KeepAlive(stack)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	runtime.KeepAlive(ptrs)
	runtime.KeepAlive(word)
	runtime.KeepAlive(oob)
	runtime.KeepAlive(msg)
	runtime.KeepAlive(sigIgn)
	if errno != 0 {
		return -1, -1, fmt.Errorf("holder: clone3: %w", syscall.Errno(errno))
	}
	if spec.failStep >= 0 {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(cpid), &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
		if *pfd >= 0 {
			unix.Close(int(*pfd))
		}
		step := fmt.Sprint("step ", spec.failStep)
		if int(spec.failStep) < len(holderSteps) {
			step = holderSteps[spec.failStep]
		}
		return -1, -1, &HolderError{Step: step, Errno: unix.Errno(spec.failErrno)}
	}
	return int(cpid), int(*pfd), nil
}
