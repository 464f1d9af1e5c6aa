// SPDX-License-Identifier: MIT

//go:build linux && amd64

#include "textflag.h"

// func clone3Holder(spec *holderSpec) (pid uintptr, errno uintptr)
//
// The child (CLONE_VM | CLONE_VFORK, on spec.args's stack, in new pid, network and mount
// namespaces) runs only this assembly until its execve: it shares the parent's memory and
// Go's runtime must not run in it. R12 holds spec in both; R14 the step that failed.
TEXT ·clone3Holder(SB),NOSPLIT,$0-24
	MOVQ	spec+0(FP), R12
	MOVQ	R12, DI			// &spec.args
	MOVQ	$88, SI			// sizeof(struct clone_args), version 2
	MOVQ	$435, AX		// clone3
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	parentok
	NEGQ	AX
	MOVQ	$-1, pid+8(FP)
	MOVQ	AX, errno+16(FP)
	RET
parentok:
	MOVQ	AX, pid+8(FP)
	MOVQ	$0, errno+16(FP)
	RET

child:
	// SIGCHLD ignored: the kernel reaps what is reparented to the holder. (Every other
	// handler is the default, CLONE_CLEAR_SIGHAND, and every signal stays blocked.)
	MOVL	$0, R14
	MOVQ	$17, DI			// SIGCHLD
	MOVQ	136(R12), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	MOVQ	$13, AX			// rt_sigaction
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVL	$1, R14
	MOVQ	$112, AX		// setsid
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	// stdin: the socket; fd 1: the program (close-on-exec); nothing else of fledge's.
	MOVL	$2, R14
	MOVQ	88(R12), DI
	MOVQ	$0, SI
	MOVQ	$0, DX
	MOVQ	$292, AX		// dup3
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVL	$3, R14
	MOVQ	96(R12), DI
	MOVQ	$1, SI
	MOVQ	$0x80000, DX		// O_CLOEXEC
	MOVQ	$292, AX		// dup3
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVL	$4, R14
	MOVQ	$2, DI
	MOVQ	$0xffffffff, SI
	MOVQ	$0, DX
	MOVQ	$436, AX		// close_range
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	// The procfs of the new namespace, while the copy of the host's mounts is still ours.
	MOVL	$5, R14
	MOVQ	152(R12), DI		// "proc"
	MOVQ	$1, SI			// FSOPEN_CLOEXEC
	MOVQ	$430, AX		// fsopen
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	AX, R13			// the fs context
	MOVQ	R13, DI
	MOVQ	$6, SI			// FSCONFIG_CMD_CREATE
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$431, AX		// fsconfig
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	R13, DI
	MOVQ	$1, SI			// FSMOUNT_CLOEXEC
	MOVQ	$15, DX			// MOUNT_ATTR_RDONLY | NOSUID | NODEV | NOEXEC
	MOVQ	$432, AX		// fsmount
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	AX, R9			// the procfs
	MOVQ	R13, DI
	MOVQ	$3, AX			// close
	SYSCALL
	// An empty read-only root (as emptyRoot of the Go holder).
	MOVL	$6, R14
	MOVQ	$0, DI
	MOVQ	160(R12), SI		// "/"
	MOVQ	$0, DX
	MOVQ	$0x44000, R10		// MS_REC | MS_PRIVATE
	MOVQ	$0, R8
	MOVQ	$165, AX		// mount
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVL	$7, R14
	MOVQ	176(R12), DI		// "fledge-pidns"
	MOVQ	192(R12), SI		// "/proc"
	MOVQ	168(R12), DX		// "tmpfs"
	MOVQ	$15, R10		// MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
	MOVQ	184(R12), R8		// its options
	MOVQ	$165, AX		// mount
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVL	$8, R14
	MOVQ	192(R12), DI		// "/proc"
	MOVQ	$80, AX			// chdir
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVL	$9, R14
	MOVQ	200(R12), DI		// "."
	MOVQ	200(R12), SI
	MOVQ	$155, AX		// pivot_root
	SYSCALL
	CMPQ	AX, $0
	JEQ	detach
	CMPQ	AX, $0xffffffffffffffea	// -EINVAL: a root that cannot be pivoted from
	JNE	fail
	MOVL	$10, R14
	MOVQ	200(R12), DI
	MOVQ	$161, AX		// chroot
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	JMP	rooted
detach:
	MOVL	$11, R14
	MOVQ	200(R12), DI		// "."
	MOVQ	$2, SI			// MNT_DETACH
	MOVQ	$166, AX		// umount2
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
rooted:
	MOVL	$8, R14
	MOVQ	160(R12), DI		// "/"
	MOVQ	$80, AX			// chdir
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	// The procfs to the host, then ours closed.
	MOVL	$12, R14
	MOVQ	112(R12), BX
	MOVL	R9, (BX)
	MOVQ	$0, DI
	MOVQ	104(R12), SI
	MOVQ	$0x4000, DX		// MSG_NOSIGNAL
	MOVQ	$46, AX			// sendmsg
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	R9, DI
	MOVQ	$3, AX			// close
	SYSCALL
	MOVL	$13, R14
	MOVQ	$1, DI			// the program's fd
	MOVQ	208(R12), SI		// ""
	MOVQ	120(R12), DX		// argv
	MOVQ	128(R12), R10		// envp
	MOVQ	$0x1000, R8		// AT_EMPTY_PATH
	MOVQ	$322, AX		// execveat
	SYSCALL
fail:
	NEGQ	AX
	MOVL	R14, 144(R12)		// failStep
	MOVL	AX, 148(R12)		// failErrno
exit:
	MOVQ	$3, DI
	MOVQ	$231, AX		// exit_group
	SYSCALL
	JMP	exit

// func clone3Parked(args *cloneArgs) (pid uintptr, errno uintptr)
//
// The child (CLONE_VM, on args's stack, every signal blocked, default handlers) only
// sleeps until it is killed; it shares the parent's memory and runs no Go code.
TEXT ·clone3Parked(SB),NOSPLIT,$0-24
	MOVQ	args+0(FP), DI
	MOVQ	$88, SI			// sizeof(struct clone_args), version 2
	MOVQ	$435, AX		// clone3
	SYSCALL
	CMPQ	AX, $0
	JEQ	parked
	CMPQ	AX, $0xfffffffffffff001
	JLS	parkedok
	NEGQ	AX
	MOVQ	$-1, pid+8(FP)
	MOVQ	AX, errno+16(FP)
	RET
parkedok:
	MOVQ	AX, pid+8(FP)
	MOVQ	$0, errno+16(FP)
	RET
parked:
	MOVQ	$34, AX			// pause: no signal is delivered, SIGKILL ends it
	SYSCALL
	JMP	parked
