// SPDX-License-Identifier: MIT

//go:build linux && amd64

#include "textflag.h"

// func clone3VFork(spec *vforkSpec) (pid uintptr, errno uintptr)
//
// The child (CLONE_VM | CLONE_VFORK, on spec.args's stack) runs only this assembly: it
// shares the parent's memory and Go's runtime must not run in it. R12 holds spec in both.
TEXT ·clone3VFork(SB),NOSPLIT,$0-24
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
	// The thread's signal mask back (the handlers are the defaults: CLONE_CLEAR_SIGHAND).
	MOVQ	$2, DI			// SIG_SETMASK
	LEAQ	160(R12), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	MOVQ	$14, AX			// rt_sigprocmask
	SYSCALL
	// Join the v1 groups: write "0" to each cgroup.procs.
	MOVQ	$0, R13
joinloop:
	CMPQ	R13, 96(R12)
	JGE	stdio
	MOVQ	88(R12), BX
	MOVQ	(BX)(R13*8), DI
	LEAQ	200(R12), SI
	MOVQ	$1, DX
	MOVQ	$1, AX			// write
	SYSCALL
	MOVL	$0, R14
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	INCQ	R13
	JMP	joinloop
stdio:
	MOVQ	$0, R13
stdioloop:
	CMPQ	R13, $3
	JGE	session
	MOVQ	104(R12)(R13*8), DI
	MOVQ	R13, SI
	MOVQ	$0, DX
	MOVQ	$292, AX		// dup3
	SYSCALL
	MOVL	$1, R14
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	INCQ	R13
	JMP	stdioloop
session:
	MOVQ	$112, AX		// setsid
	SYSCALL
	MOVL	$2, R14
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	$0, DI
	MOVQ	$4, SI			// RLIMIT_CORE
	LEAQ	128(R12), DX
	MOVQ	$0, R10
	MOVQ	$302, AX		// prlimit64
	SYSCALL
	MOVL	$3, R14
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	$0, DI
	MOVQ	$7, SI			// RLIMIT_NOFILE
	LEAQ	144(R12), DX
	MOVQ	$0, R10
	MOVQ	$302, AX		// prlimit64
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	// The command's Landlock domain: made here, not on the forking thread (see
	// ExecChild.Landlock).
	MOVQ	256(R12), DI
	CMPQ	DI, $0
	JLT	filter
	MOVQ	264(R12), SI
	MOVQ	$446, AX		// landlock_restrict_self
	SYSCALL
	MOVL	$6, R14
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
filter:
	// The command's seccomp filter, last: nothing of ours runs under it but the
	// listener's hand-over and execve.
	MOVQ	216(R12), DX
	CMPQ	DX, $0
	JEQ	doexec
	MOVQ	$1, DI			// SECCOMP_SET_MODE_FILTER
	MOVQ	208(R12), SI
	MOVQ	$317, AX		// seccomp
	SYSCALL
	MOVL	$5, R14
	CMPQ	AX, $0xfffffffffffffff0	// -EBUSY: an enclosing filter has the listener
	JNE	installed
	MOVQ	224(R12), DX
	CMPQ	DX, $0
	JEQ	fail
	MOVQ	$1, DI
	MOVQ	$0, SI
	MOVQ	$317, AX		// seccomp, without a listener
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	$1, 272(R12)		// spec.plain: no listener was sent
	JMP	doexec
installed:
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
	MOVQ	232(R12), DI
	CMPQ	DI, $0
	JLT	doexec
	MOVQ	248(R12), BX
	MOVL	AX, (BX)		// the listener into the message
	MOVQ	240(R12), SI
	MOVQ	$0x4000, DX		// MSG_NOSIGNAL
	MOVQ	$46, AX			// sendmsg
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCC	fail
doexec:
	MOVQ	168(R12), DI
	MOVQ	176(R12), SI
	MOVQ	184(R12), DX
	MOVQ	$59, AX			// execve
	SYSCALL
	MOVL	$4, R14
fail:
	NEGQ	AX
	MOVL	R14, 192(R12)		// fail.step
	MOVL	AX, 196(R12)		// fail.errno
exit:
	MOVQ	$127, DI
	MOVQ	$231, AX		// exit_group
	SYSCALL
	JMP	exit
