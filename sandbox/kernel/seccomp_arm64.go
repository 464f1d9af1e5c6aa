// SPDX-License-Identifier: MIT

//go:build linux

package kernel

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

const sysKexecLoad = unix.SYS_KEXEC_LOAD

// sysKexecFileLoad: 32-bit architectures have no kexec_file_load.
const sysKexecFileLoad = unix.SYS_KEXEC_FILE_LOAD

var modeRules = []modeRule{
	{name: "openat", nr: unix.SYS_OPENAT, modeArg: 3, flagsArg: 2},
	{name: "fchmod", nr: unix.SYS_FCHMOD, modeArg: 1, flagsArg: -1},
	{name: "fchmodat", nr: unix.SYS_FCHMODAT, modeArg: 2, flagsArg: -1},
	{name: "fchmodat2", nr: unix.SYS_FCHMODAT2, modeArg: 2, flagsArg: -1},
	{name: "mknodat", nr: unix.SYS_MKNODAT, modeArg: 2, flagsArg: -1},
}

var archRules []rule

// traceCalls are the syscalls Filter.Trace sends to the listener (arm64 has only the *at
// forms).
var traceCalls = []traceCall{
	{name: "openat", nr: unix.SYS_OPENAT, dirArg: 0, pathArg: 1, flagsArg: 2, access: accessOpen},
	{name: "newfstatat", nr: unix.SYS_FSTATAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "statx", nr: unix.SYS_STATX, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "faccessat", nr: unix.SYS_FACCESSAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "faccessat2", nr: unix.SYS_FACCESSAT2, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "readlinkat", nr: unix.SYS_READLINKAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessStat},
	{name: "mkdirat", nr: unix.SYS_MKDIRAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessWrite},
	{name: "unlinkat", nr: unix.SYS_UNLINKAT, dirArg: 0, pathArg: 1, flagsArg: -1, access: accessWrite},
	{name: "connect", nr: unix.SYS_CONNECT, dirArg: -1, pathArg: -1, flagsArg: -1, access: accessConnect},
}
