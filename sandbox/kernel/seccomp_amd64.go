// SPDX-License-Identifier: MIT

//go:build linux

package kernel

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

const sysKexecLoad = unix.SYS_KEXEC_LOAD

// sysKexecFileLoad: 32-bit architectures have no kexec_file_load.
const sysKexecFileLoad = unix.SYS_KEXEC_FILE_LOAD

var modeRules = []modeRule{
	{name: "open", nr: unix.SYS_OPEN, modeArg: 2, flagsArg: 1},
	{name: "openat", nr: unix.SYS_OPENAT, modeArg: 3, flagsArg: 2},
	{name: "creat", nr: unix.SYS_CREAT, modeArg: 1, flagsArg: -1},
	{name: "chmod", nr: unix.SYS_CHMOD, modeArg: 1, flagsArg: -1},
	{name: "fchmod", nr: unix.SYS_FCHMOD, modeArg: 1, flagsArg: -1},
	{name: "fchmodat", nr: unix.SYS_FCHMODAT, modeArg: 2, flagsArg: -1},
	{name: "fchmodat2", nr: unix.SYS_FCHMODAT2, modeArg: 2, flagsArg: -1},
	{name: "mknod", nr: unix.SYS_MKNOD, modeArg: 1, flagsArg: -1},
	{name: "mknodat", nr: unix.SYS_MKNODAT, modeArg: 2, flagsArg: -1},
}

// archRules: x86-only calls: ways to the hardware and calls the generic (arm64) table does
// not have.
var archRules = []rule{
	{name: "iopl", nr: unix.SYS_IOPL, errno: unix.EPERM, why: "raw I/O port access"},
	{name: "ioperm", nr: unix.SYS_IOPERM, errno: unix.EPERM, why: "raw I/O port access"},
	{name: "modify_ldt", nr: unix.SYS_MODIFY_LDT, errno: unix.EPERM,
		why: "the x86 local descriptor table: 16-bit segments for Wine and DOS emulators, reachable by any uid and the way into several kernel bugs"},
	{name: "ustat", nr: unix.SYS_USTAT, errno: unix.EPERM,
		why: "statistics of any mounted filesystem named by device number, past the private view"},
}

// traceCalls are the syscalls Filter.Trace sends to the listener: every way a program
// names a path to open, inspect or run, and connect.
var traceCalls = []traceCall{
	{name: "open", nr: unix.SYS_OPEN, dirArg: -1, pathArg: 0, flagsArg: 1, access: accessOpen},
	{name: "creat", nr: unix.SYS_CREAT, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessWrite},
	{name: "openat", nr: unix.SYS_OPENAT, dirArg: 0, pathArg: 1, flagsArg: 2, access: accessOpen},
	{name: "stat", nr: unix.SYS_STAT, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessStat},
	{name: "lstat", nr: unix.SYS_LSTAT, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessStat},
	{name: "newfstatat", nr: unix.SYS_NEWFSTATAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "statx", nr: unix.SYS_STATX, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "access", nr: unix.SYS_ACCESS, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessStat},
	{name: "faccessat", nr: unix.SYS_FACCESSAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "faccessat2", nr: unix.SYS_FACCESSAT2, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "readlink", nr: unix.SYS_READLINK, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessStat},
	{name: "readlinkat", nr: unix.SYS_READLINKAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "mkdir", nr: unix.SYS_MKDIR, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessWrite},
	{name: "mkdirat", nr: unix.SYS_MKDIRAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessWrite},
	{name: "unlink", nr: unix.SYS_UNLINK, dirArg: -1, pathArg: 0, flagsArg: -1, access: accessWrite},
	{name: "unlinkat", nr: unix.SYS_UNLINKAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessWrite},
	{name: "connect", nr: unix.SYS_CONNECT, dirArg: -1, pathArg: -1, flagsArg: -1, access: accessConnect},
}
