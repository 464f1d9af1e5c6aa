//go:build linux

package kernel

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

const sysKexecLoad = unix.SYS_KEXEC_LOAD

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

// archRules: x86-only ways to the hardware.
var archRules = []rule{
	{name: "iopl", nr: unix.SYS_IOPL, errno: unix.EPERM, why: "raw I/O port access"},
	{name: "ioperm", nr: unix.SYS_IOPERM, errno: unix.EPERM, why: "raw I/O port access"},
}
