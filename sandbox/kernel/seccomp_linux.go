package kernel

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes two ways out that Landlock (ABI <= 7) leaves open:
//
//  1. Unix-domain sockets. A command that can connect to /var/run/docker.sock (any member of
//     the docker group) or, as root, to the systemd or D-Bus system sockets, can start a
//     privileged container or a root service — a full escape from every other restriction.
//     Path-based connect() cannot be filtered by path, so creating AF_UNIX sockets is refused
//     (EACCES) unless policy allows them. socketpair(AF_UNIX) stays allowed: an anonymous
//     connected pair (libuv and Python use it for their own pipes) reaches no one. Abstract
//     sockets are scoped by Landlock (ABI 6) on top.
//  2. Set-user-ID and set-group-ID bits. Landlock does not govern chmod, and as root every
//     system file is root's own: a command could plant a setuid-root binary for later. Any
//     chmod, open(O_CREAT) or mknod asking for S_ISUID or S_ISGID is refused (EPERM);
//     ordinary modes (chmod +x, 0644) are untouched. openat2, whose mode sits behind a
//     pointer the filter cannot read, answers ENOSYS (callers fall back to openat).
//
// Foreign syscall ABIs (i386 via int 0x80, x32) are refused outright: their numbers differ.

// ErrSeccompArch: no filter is defined for this CPU architecture.
var ErrSeccompArch = errors.New("seccomp filter: unsupported architecture")

// seccomp_data offsets (include/uapi/linux/seccomp.h), little-endian args.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
	// x32 syscalls on x86_64 carry this bit.
	x32Bit = 0x40000000

	setIDBits = unix.S_ISUID | unix.S_ISGID
)

// modeRule: syscall nr takes a mode in argument modeArg; flagsArg >= 0 means the mode only
// counts when that argument has O_CREAT.
type modeRule struct {
	nr                uint32
	modeArg, flagsArg int
}

// asm is a tiny BPF assembler with forward labels.
type asm struct {
	prog   []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at       int
	jt, jf   string
	hasJumps bool
}

func (a *asm) label(name string) { a.labels[name] = len(a.prog) }

func (a *asm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

// jump adds a conditional jump to labels jt/jf ("" = next instruction).
func (a *asm) jump(code uint16, k uint32, jt, jf string) {
	a.fixups = append(a.fixups, fixup{at: len(a.prog), jt: jt, jf: jf, hasJumps: true})
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *asm) resolve() ([]unix.SockFilter, error) {
	for _, f := range a.fixups {
		for _, pair := range []struct {
			name string
			dst  *uint8
		}{{f.jt, &a.prog[f.at].Jt}, {f.jf, &a.prog[f.at].Jf}} {
			if pair.name == "" {
				continue
			}
			to, ok := a.labels[pair.name]
			if !ok {
				return nil, fmt.Errorf("seccomp: unknown label %q", pair.name)
			}
			off := to - f.at - 1
			if off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp: jump to %q out of range", pair.name)
			}
			*pair.dst = uint8(off)
		}
	}
	return a.prog, nil
}

func argLow(i int) uint32 { return uint32(offArgs + 8*i) }

// buildFilter is the BPF program for the native architecture.
func buildFilter(denyUnix bool) ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, ErrSeccompArch
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	a := &asm{labels: map[string]int{}}
	a.stmt(ld, offArch)
	a.jump(jeq, auditArch, "", "enosys")
	a.stmt(ld, offNr)
	a.jump(jge, x32Bit, "enosys", "")
	a.jump(jeq, uint32(unix.SYS_OPENAT2), "enosys", "")
	if denyUnix {
		a.jump(jeq, uint32(unix.SYS_SOCKET), "socket", "")
	}
	for i, r := range modeRules {
		a.jump(jeq, r.nr, fmt.Sprint("mode", i), "")
	}
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	if denyUnix {
		a.label("socket")
		a.stmt(ld, argLow(0))
		a.jump(jeq, unix.AF_UNIX, "eacces", "allow")
	}
	for i, r := range modeRules {
		a.label(fmt.Sprint("mode", i))
		if r.flagsArg >= 0 {
			a.stmt(ld, argLow(r.flagsArg))
			a.jump(jset, unix.O_CREAT, "", "allow")
		}
		a.stmt(ld, argLow(r.modeArg))
		a.jump(jset, setIDBits, "eperm", "allow")
	}
	a.label("allow")
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	a.label("eacces")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EACCES))
	a.label("eperm")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	a.label("enosys")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	return a.resolve()
}

// InstallFilter installs the filter on the calling thread only (inherited by what it forks
// and execs). no_new_privs must already be set on this thread. Where the architecture has
// no filter (SeccompSupported false) it does nothing: the sandbox reports that as degraded
// before it gets here.
func InstallFilter(denyUnix bool) error {
	if !SeccompSupported() {
		return nil
	}
	prog, err := buildFilter(denyUnix)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// SeccompSupported reports whether this architecture has the filter.
func SeccompSupported() bool { return auditArch != 0 }

// UnixSocketFilterSupported is SeccompSupported (kept for callers that ask about sockets).
func UnixSocketFilterSupported() bool { return SeccompSupported() }
