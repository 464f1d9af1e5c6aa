//go:build linux

package kernel

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

var modeRules = []modeRule{
	{nr: unix.SYS_OPEN, modeArg: 2, flagsArg: 1},
	{nr: unix.SYS_OPENAT, modeArg: 3, flagsArg: 2},
	{nr: unix.SYS_CREAT, modeArg: 1, flagsArg: -1},
	{nr: unix.SYS_CHMOD, modeArg: 1, flagsArg: -1},
	{nr: unix.SYS_FCHMOD, modeArg: 1, flagsArg: -1},
	{nr: unix.SYS_FCHMODAT, modeArg: 2, flagsArg: -1},
	{nr: unix.SYS_FCHMODAT2, modeArg: 2, flagsArg: -1},
	{nr: unix.SYS_MKNOD, modeArg: 1, flagsArg: -1},
	{nr: unix.SYS_MKNODAT, modeArg: 2, flagsArg: -1},
}
