package stub

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Unix-domain sockets are the one way out that neither Landlock (below ABI 9) nor an empty
// network namespace closes: a command that can connect to /var/run/docker.sock (any member
// of the docker group) or, as root, to the systemd or D-Bus system sockets, can start a
// privileged container or a root service — a full escape from every other restriction.
// Path-based connect() cannot be filtered by path with seccomp, so the filter refuses to
// create AF_UNIX sockets at all (EACCES). socketpair(AF_UNIX) stays allowed: it makes an
// anonymous connected pair (libuv and Python use it for their own pipes) and reaches no one.
// Abstract sockets are scoped by Landlock (ABI 6) on top.

// ErrSeccompArch: no filter is defined for this CPU architecture.
var ErrSeccompArch = errors.New("seccomp unix-socket filter: unsupported architecture")

// seccomp_data offsets (include/uapi/linux/seccomp.h), little-endian args.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	// x32 syscalls on x86_64 carry this bit; they are refused outright.
	x32Bit = 0x40000000
)

func bpfStmt(code uint16, k uint32) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k}
}

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// unixSocketFilter is the BPF program for the native architecture.
func unixSocketFilter() ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, ErrSeccompArch
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	deny := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EACCES)
	return []unix.SockFilter{
		/* 0 */ bpfStmt(ld, offArch),
		/* 1 */ bpfJump(jeq, auditArch, 1, 0), // native arch: go on
		/* 2 */ bpfStmt(ret, uint32(unix.SECCOMP_RET_ERRNO)|uint32(unix.ENOSYS)), // foreign ABI (i386 socketcall, ...)
		/* 3 */ bpfStmt(ld, offNr),
		/* 4 */ bpfJump(jge, x32Bit, 4, 0), // x32 on x86_64: refuse (9)
		/* 5 */ bpfJump(jeq, uint32(unix.SYS_SOCKET), 0, 2),
		/* 6 */ bpfStmt(ld, offArg0),
		/* 7 */ bpfJump(jeq, unix.AF_UNIX, 1, 0),
		/* 8 */ bpfStmt(ret, allow),
		/* 9 */ bpfStmt(ret, deny),
	}, nil
}

// denyUnixSockets installs the filter on the calling thread (inherited by what it forks and
// execs). no_new_privs must already be set on this thread.
func denyUnixSockets() error {
	prog, err := unixSocketFilter()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// DenyUnixSockets is denyUnixSockets for the Linux thread launcher (per-thread, like the
// other launch steps).
func DenyUnixSockets() error { return denyUnixSockets() }

// UnixSocketFilterSupported reports whether this architecture has the filter.
func UnixSocketFilterSupported() bool { return auditArch != 0 }
