//go:build linux

package kernel

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_AARCH64

const sysKexecLoad = unix.SYS_KEXEC_LOAD

var modeRules = []modeRule{
	{name: "openat", nr: unix.SYS_OPENAT, modeArg: 3, flagsArg: 2},
	{name: "fchmod", nr: unix.SYS_FCHMOD, modeArg: 1, flagsArg: -1},
	{name: "fchmodat", nr: unix.SYS_FCHMODAT, modeArg: 2, flagsArg: -1},
	{name: "fchmodat2", nr: unix.SYS_FCHMODAT2, modeArg: 2, flagsArg: -1},
	{name: "mknodat", nr: unix.SYS_MKNODAT, modeArg: 2, flagsArg: -1},
}

var archRules []rule
