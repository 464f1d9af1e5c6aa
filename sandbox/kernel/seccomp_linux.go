// SPDX-License-Identifier: MIT

package kernel

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny-list: everything not listed is allowed, so ordinary
// programs (shells, compilers, git, Python, Go) run unchanged. It closes what Landlock and
// the dropped capabilities leave open:
//
//  1. Sockets. A command that can connect to /var/run/docker.sock (any member of
//     the docker group) or, as root, to the systemd or D-Bus system sockets, can start a
//     privileged container or a root service — a full escape from every other restriction.
//     Path-based connect() cannot be filtered by path, so creating AF_UNIX sockets is refused
//     (EACCES) unless policy allows them. Of the other families only AF_INET, AF_INET6 and
//     AF_NETLINK may be created (an allow-list, as Docker's default profile now keeps one):
//     the rest (AF_ALG, AF_VSOCK, TIPC, RDS, CAN, Bluetooth, ...) are protocol code any uid
//     reaches, often in a module the kernel loads for the asking, and no project command
//     needs them. socketpair(AF_UNIX) is the other way to get one:
//     a SOCK_STREAM or SOCK_SEQPACKET pair is connected for good (connect answers EISCONN,
//     an address given to sendto is refused or ignored), so it reaches no one and stays
//     allowed (libuv, node, Python and Chromium use it for their own children). A
//     SOCK_DGRAM pair is not: either end can sendto(2) or connect(2) any pathname datagram
//     socket it can see. So socketpair(AF_UNIX) of any other type (SOCK_DGRAM, and SOCK_RAW,
//     which the kernel turns into SOCK_DGRAM) is refused too, and so is a pair of any family
//     socket(2) refuses. Abstract sockets are scoped by
//     Landlock (ABI 6) on top.
//  2. Set-user-ID and set-group-ID bits. Landlock does not govern chmod, and as root every
//     system file is root's own: a command could plant a setuid-root binary for later. Any
//     chmod, open(O_CREAT) or mknod asking for S_ISUID or S_ISGID is refused (EPERM);
//     ordinary modes (chmod +x, 0644) are untouched. openat2, whose mode sits behind a
//     pointer the filter cannot read, answers ENOSYS (callers fall back to openat).
//  3. Kernel attack surface no project command needs (the table in denyTable): io_uring,
//     keyrings, new namespaces and mounts, eBPF, perf, userfaultfd, modules, kexec, file
//     handles, other processes' memory, ptrace attach, kcmp, personality changes, fanotify,
//     Linux AIO contexts, the x86 LDT and host administration. Modelled on Docker's default
//     profile (what it allows only with a capability fledge drops), firejail's default list
//     and Codex's Linux sandbox. These answer EPERM, never a kill, so a program that probes
//     (a runtime checking for io_uring) falls back.
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

	// nsCloneMask is every CLONE_NEW* flag clone(2) takes (Docker's 0x7E020000). The kernel
	// reads clone's flags as their low 32 bits, which is all the filter compares.
	nsCloneMask = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	// nsUnshareMask adds CLONE_NEWTIME, which only unshare takes (in clone it is CSIGNAL).
	nsUnshareMask = nsCloneMask | unix.CLONE_NEWTIME

	ptraceSeize = 0x4206 // PTRACE_SEIZE

	// sockTypeMask is the kernel's SOCK_TYPE_MASK: socket types sit in the low four bits,
	// SOCK_NONBLOCK and SOCK_CLOEXEC above them.
	sockTypeMask = 0xf
)

// personalityAllowed are the personality(2) arguments Docker's default profile allows:
// PER_LINUX, PER_LINUX32 (0x8), UNAME26 (0x20000), UNAME26|PER_LINUX32 and 0xffffffff
// (query). Everything else (ADDR_NO_RANDOMIZE turning off ASLR, READ_IMPLIES_EXEC making
// every readable mapping executable, foreign execution domains) is refused.
var personalityAllowed = []uint32{0, 0x8, 0x20000, 0x20008, 0xffffffff}

// check is how a rule looks at its syscall's first argument (low 32 bits).
type check int

const (
	always       check = iota // deny every call
	anyBit                    // deny when arg0 & values[0] != 0
	oneOf                     // deny when arg0 is one of values
	noneOf                    // deny unless arg0 is one of values
	setIDMode                 // the set-id rules: mode argument has S_ISUID/S_ISGID
	socketFamily              // socket(domain not in values); AF_UNIX answered apart (Filter.DenyUnix)
	socketPair                // socketpair: as socketFamily, AF_UNIX only as a stream/seqpacket pair when Filter.DenyUnix
	denyClone3                // clone3: ENOSYS
	enosysAlways              // ENOSYS unconditionally (openat2)
	anyBitArg                 // deny when argument modeArg & values[0] != 0
)

// rule is one row of the deny table.
type rule struct {
	name   string
	nr     int // -1: not on this architecture
	check  check
	values []uint32
	errno  unix.Errno
	why    string
	// modeArg/flagsArg for setIDMode (flagsArg >= 0: only with O_CREAT in that argument);
	// modeArg is anyBitArg's argument too.
	modeArg, flagsArg int
	// tcpOnly: the socket row lets AF_INET and AF_INET6 make TCP stream sockets only
	// (Filter.TCPOnly).
	tcpOnly bool
}

const (
	whyNS       = "new namespaces and mounts: a user namespace hands the command every capability over a fresh kernel surface, and mounts would rearrange its filesystem view"
	whyKeys     = "kernel keyrings are not namespaced: a command could read or plant keys in the user's session keyring"
	whyURing    = "io_uring: a large, often-exploited kernel surface whose submitted operations the filter cannot see"
	whyModule   = "loading or unloading kernel code"
	whyKexec    = "replacing the running kernel"
	whyVM       = "reads or writes another process's memory"
	whyAdmin    = "host administration, never needed by a project command"
	whyMountFD  = "the new mount API (fsopen/fsmount/...): mounts without mount(2)"
	whyFastOpen = "without a network namespace of its own a run's network bound is Landlock's TCP rules, which see connect(2): MSG_FASTOPEN connects by sendto/sendmsg, past them"
	whyFamily   = "other socket families are protocol code any uid reaches (AF_ALG, TIPC, RDS, CAN, ..., often a module loaded for the asking); AF_VSOCK reaches the hypervisor's and the host's vsock services past any network namespace"
)

// socketFamilies are the socket(2) domains a command may create: IPv4, IPv6, netlink
// (glibc's getaddrinfo and getifaddrs, ip(8) and node's os.networkInterfaces read the
// interfaces over it; the kernel refuses its state-changing requests without the
// capabilities commands do not hold) and AF_UNIX unless the policy denies unix sockets.
// An allow-list, as Docker's default profile keeps: every other family, present and
// future, is refused.
func socketFamilies(f Filter) []uint32 {
	d := []uint32{unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}
	if !f.DenyUnix {
		d = append(d, unix.AF_UNIX)
	}
	return d
}

// netlinkProtocols are the AF_NETLINK protocols socket(2) may open: routes, addresses and
// interfaces (NETLINK_ROUTE: getaddrinfo, getifaddrs, ip(8), node, Go), socket lists
// (NETLINK_SOCK_DIAG: ss(8)), generic netlink (ethtool, iw: every request that changes
// anything needs a capability), audit and netfilter (every request needs a capability;
// libaudit's callers treat only "not in the kernel" errors as harmless, so the socket
// stays and the kernel refuses the message) and device events (NETLINK_KOBJECT_UEVENT:
// libusb and udev monitors open it at start). Every other protocol is refused, above all
// NETLINK_CONNECTOR: in the host's network namespace (a run granted the network shares
// it) its process connector tells any listener, whatever its capabilities since Linux
// 6.6, every fork, exec, exit, uid change and name of every process of the host, past the
// pid namespace; the others (XFRM, SELinux, SCSI transport, RDMA, crypto, SMC, ...) no
// project command needs.
var netlinkProtocols = []uint32{unix.NETLINK_ROUTE, unix.NETLINK_SOCK_DIAG, unix.NETLINK_AUDIT,
	unix.NETLINK_NETFILTER, unix.NETLINK_KOBJECT_UEVENT, unix.NETLINK_GENERIC}

// netlinkName names the protocols of netlinkProtocols.
func netlinkName(v uint32) string {
	switch v {
	case unix.NETLINK_ROUTE:
		return "NETLINK_ROUTE"
	case unix.NETLINK_SOCK_DIAG:
		return "NETLINK_SOCK_DIAG"
	case unix.NETLINK_AUDIT:
		return "NETLINK_AUDIT"
	case unix.NETLINK_NETFILTER:
		return "NETLINK_NETFILTER"
	case unix.NETLINK_KOBJECT_UEVENT:
		return "NETLINK_KOBJECT_UEVENT"
	case unix.NETLINK_GENERIC:
		return "NETLINK_GENERIC"
	case unix.NETLINK_CONNECTOR:
		return "NETLINK_CONNECTOR"
	case unix.NETLINK_XFRM:
		return "NETLINK_XFRM"
	case unix.NETLINK_SELINUX:
		return "NETLINK_SELINUX"
	}
	return fmt.Sprint(v)
}

// familyName names the families socketFamilies may hold.
func familyName(v uint32) string {
	switch v {
	case unix.AF_UNIX:
		return "AF_UNIX"
	case unix.AF_INET:
		return "AF_INET"
	case unix.AF_INET6:
		return "AF_INET6"
	case unix.AF_NETLINK:
		return "AF_NETLINK"
	// And the ones a refusal record names most (socketObject).
	case unix.AF_KEY:
		return "AF_KEY"
	case unix.AF_PACKET:
		return "AF_PACKET"
	case unix.AF_RDS:
		return "AF_RDS"
	case unix.AF_CAN:
		return "AF_CAN"
	case unix.AF_TIPC:
		return "AF_TIPC"
	case unix.AF_BLUETOOTH:
		return "AF_BLUETOOTH"
	case unix.AF_ALG:
		return "AF_ALG"
	case unix.AF_VSOCK:
		return "AF_VSOCK"
	case unix.AF_XDP:
		return "AF_XDP"
	case unix.AF_MCTP:
		return "AF_MCTP"
	}
	return fmt.Sprint(v)
}

// socketObject describes what a refused socket or socketpair call asked for, for its
// refusal record: "family=AF_VSOCK type=SOCK_STREAM protocol=0". The kernel reads each
// argument as an int, so only the low 32 bits count, as in the filter.
func socketObject(args [6]uint64) string {
	family, typ, proto := uint32(args[0]), uint32(args[1]), uint32(args[2])
	t := fmt.Sprint(typ &^ (unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC))
	switch typ &^ (unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC) {
	case unix.SOCK_STREAM:
		t = "SOCK_STREAM"
	case unix.SOCK_DGRAM:
		t = "SOCK_DGRAM"
	case unix.SOCK_RAW:
		t = "SOCK_RAW"
	case unix.SOCK_RDM:
		t = "SOCK_RDM"
	case unix.SOCK_SEQPACKET:
		t = "SOCK_SEQPACKET"
	}
	p := fmt.Sprint(proto)
	if family == unix.AF_NETLINK {
		p = netlinkName(proto)
	}
	return "family=" + familyName(family) + " type=" + t + " protocol=" + p
}

func socketWhy(f Filter) string {
	if f.DenyUnix {
		return "AF_UNIX sockets reach docker.sock, D-Bus and systemd (unless the policy allows unix sockets); " + whyFamily
	}
	return whyFamily
}

// denyTable is the whole deny-list for this architecture, in the order the filter checks
// it. Every row is enforced; DeniedSyscalls reports it.
func denyTable(f Filter) []rule {
	rules := []rule{
		{name: "socket", nr: unix.SYS_SOCKET, check: socketFamily, values: socketFamilies(f), errno: unix.EACCES,
			why: socketWhy(f), tcpOnly: f.TCPOnly},
		{name: "socketpair", nr: unix.SYS_SOCKETPAIR, check: socketPair, values: socketFamilies(f), errno: unix.EACCES,
			why: "a pair of a family socket(2) refuses reaches the same protocol code; an AF_UNIX datagram pair can sendto or connect any pathname socket it sees (unless the policy allows unix sockets), while connected stream and seqpacket pairs reach no one and stay allowed"},
		{name: "openat2", nr: unix.SYS_OPENAT2, check: enosysAlways, errno: unix.ENOSYS,
			why: "its mode sits behind a pointer the set-id rule cannot read; libc falls back to openat"},
		{name: "clone", nr: unix.SYS_CLONE, check: anyBit, values: []uint32{nsCloneMask}, errno: unix.EPERM, why: whyNS},
		{name: "clone3", nr: unix.SYS_CLONE3, check: denyClone3, errno: unix.ENOSYS,
			why: "its flags are in memory the filter cannot read, so it cannot be checked for namespace flags; ENOSYS makes libc fall back to clone (as Docker does)"},
		{name: "unshare", nr: unix.SYS_UNSHARE, check: anyBit, values: []uint32{nsUnshareMask}, errno: unix.EPERM, why: whyNS},
		{name: "setns", nr: unix.SYS_SETNS, errno: unix.EPERM, why: whyNS},
		{name: "mount", nr: unix.SYS_MOUNT, errno: unix.EPERM, why: whyNS},
		{name: "umount2", nr: unix.SYS_UMOUNT2, errno: unix.EPERM, why: whyNS},
		{name: "pivot_root", nr: unix.SYS_PIVOT_ROOT, errno: unix.EPERM, why: whyNS},
		{name: "fsopen", nr: unix.SYS_FSOPEN, errno: unix.EPERM, why: whyMountFD},
		{name: "fsconfig", nr: unix.SYS_FSCONFIG, errno: unix.EPERM, why: whyMountFD},
		{name: "fsmount", nr: unix.SYS_FSMOUNT, errno: unix.EPERM, why: whyMountFD},
		{name: "fspick", nr: unix.SYS_FSPICK, errno: unix.EPERM, why: whyMountFD},
		{name: "move_mount", nr: unix.SYS_MOVE_MOUNT, errno: unix.EPERM, why: whyMountFD},
		{name: "open_tree", nr: unix.SYS_OPEN_TREE, errno: unix.EPERM, why: whyMountFD},
		{name: "mount_setattr", nr: unix.SYS_MOUNT_SETATTR, errno: unix.EPERM, why: whyMountFD},
		{name: "io_uring_setup", nr: unix.SYS_IO_URING_SETUP, errno: unix.EPERM, why: whyURing},
		{name: "io_uring_enter", nr: unix.SYS_IO_URING_ENTER, errno: unix.EPERM, why: whyURing},
		{name: "io_uring_register", nr: unix.SYS_IO_URING_REGISTER, errno: unix.EPERM, why: whyURing},
		{name: "keyctl", nr: unix.SYS_KEYCTL, errno: unix.EPERM, why: whyKeys},
		{name: "add_key", nr: unix.SYS_ADD_KEY, errno: unix.EPERM, why: whyKeys},
		{name: "request_key", nr: unix.SYS_REQUEST_KEY, errno: unix.EPERM, why: whyKeys},
		{name: "bpf", nr: unix.SYS_BPF, errno: unix.EPERM, why: "eBPF programs and maps: kernel attack surface and a view of other processes"},
		{name: "perf_event_open", nr: unix.SYS_PERF_EVENT_OPEN, errno: unix.EPERM, why: "performance counters: side channels and a long history of kernel bugs"},
		{name: "userfaultfd", nr: unix.SYS_USERFAULTFD, errno: unix.EPERM, why: "lets an exploit stall the kernel in the middle of a copy (a race-widening primitive)"},
		{name: "init_module", nr: unix.SYS_INIT_MODULE, errno: unix.EPERM, why: whyModule},
		{name: "finit_module", nr: unix.SYS_FINIT_MODULE, errno: unix.EPERM, why: whyModule},
		{name: "delete_module", nr: unix.SYS_DELETE_MODULE, errno: unix.EPERM, why: whyModule},
		{name: "kexec_load", nr: sysKexecLoad, errno: unix.EPERM, why: whyKexec},
		{name: "kexec_file_load", nr: sysKexecFileLoad, errno: unix.EPERM, why: whyKexec},
		{name: "open_by_handle_at", nr: unix.SYS_OPEN_BY_HANDLE_AT, errno: unix.EPERM, why: "opens files by handle, past every path check (the \"shocker\" container escape)"},
		{name: "process_vm_readv", nr: unix.SYS_PROCESS_VM_READV, errno: unix.EPERM, why: whyVM},
		{name: "process_vm_writev", nr: unix.SYS_PROCESS_VM_WRITEV, errno: unix.EPERM, why: whyVM},
		{name: "pidfd_getfd", nr: unix.SYS_PIDFD_GETFD, errno: unix.EPERM, why: "copies another process's file descriptors"},
		{name: "kcmp", nr: unix.SYS_KCMP, errno: unix.EPERM,
			why: "compares kernel objects (files, memory, file tables) of two processes: a cross-process probe Docker allows only with CAP_SYS_PTRACE"},
		{name: "fanotify_init", nr: unix.SYS_FANOTIFY_INIT, errno: unix.EPERM,
			why: "unprivileged fanotify groups count against the caller's uid (shared with the host's root when fledge runs as root); inotify stays for file watchers"},
		{name: "io_setup", nr: unix.SYS_IO_SETUP, errno: unix.EPERM,
			why: "Linux AIO contexts come out of fs.aio-max-nr, one budget for the whole host: two calls take all of it from the host's databases and VMs"},
		// BPF cannot tell whether ptrace's target pid is a descendant. Refusing the two
		// requests that attach to a process that did not ask for it leaves only tracees
		// that are descendants: a child that called PTRACE_TRACEME (its parent traces
		// it), and the children of a tracee auto-attached by PTRACE_O_TRACE{FORK,CLONE}.
		// Every other request acts on an existing tracee only. (strace -p and attaching a
		// debugger are refused; gdb ./prog, which uses TRACEME, works.)
		{name: "ptrace", nr: unix.SYS_PTRACE, check: oneOf, values: []uint32{unix.PTRACE_ATTACH, ptraceSeize}, errno: unix.EPERM,
			why: "PTRACE_ATTACH and PTRACE_SEIZE would attach to a process that is not the command's own descendant"},
		{name: "personality", nr: unix.SYS_PERSONALITY, check: noneOf, values: personalityAllowed, errno: unix.EPERM,
			why: "execution-domain changes (ADDR_NO_RANDOMIZE disables ASLR, READ_IMPLIES_EXEC); Docker's allowed values still work"},
		{name: "swapon", nr: unix.SYS_SWAPON, errno: unix.EPERM, why: whyAdmin},
		{name: "swapoff", nr: unix.SYS_SWAPOFF, errno: unix.EPERM, why: whyAdmin},
		{name: "reboot", nr: unix.SYS_REBOOT, errno: unix.EPERM, why: whyAdmin},
		{name: "acct", nr: unix.SYS_ACCT, errno: unix.EPERM, why: whyAdmin},
		{name: "quotactl", nr: unix.SYS_QUOTACTL, errno: unix.EPERM, why: whyAdmin},
		{name: "quotactl_fd", nr: unix.SYS_QUOTACTL_FD, errno: unix.EPERM, why: whyAdmin},
		{name: "syslog", nr: unix.SYS_SYSLOG, errno: unix.EPERM, why: "the kernel log leaks kernel addresses and other processes' messages"},
	}
	rules = append(rules, archRules...)
	for _, m := range modeRules {
		rules = append(rules, rule{name: m.name, nr: m.nr, check: setIDMode, errno: unix.EPERM, modeArg: m.modeArg, flagsArg: m.flagsArg,
			why: "setting S_ISUID/S_ISGID would plant a set-id program (ordinary modes are untouched)"})
	}
	if f.TCPOnly {
		for _, r := range []struct {
			name string
			nr   int
			arg  int
		}{{"sendto", unix.SYS_SENDTO, 3}, {"sendmsg", unix.SYS_SENDMSG, 2}, {"sendmmsg", unix.SYS_SENDMMSG, 3}} {
			rules = append(rules, rule{name: r.name, nr: r.nr, check: anyBitArg, values: []uint32{unix.MSG_FASTOPEN},
				modeArg: r.arg, errno: unix.EACCES, why: whyFastOpen})
		}
	}
	out := rules[:0]
	for _, r := range rules {
		if r.nr < 0 {
			continue
		}
		out = append(out, r)
	}
	return out
}

func (r rule) when() string {
	hex := func(v uint32) string { return fmt.Sprintf("%#x", v) }
	switch r.check {
	case anyBit:
		return "flags include CLONE_NEW* (" + hex(r.values[0]) + ")"
	case anyBitArg:
		return "flags include MSG_FASTOPEN"
	case oneOf:
		return "request is PTRACE_ATTACH or PTRACE_SEIZE"
	case noneOf:
		s := "argument is not one of"
		for _, v := range r.values {
			s += " " + hex(v)
		}
		return s
	case setIDMode:
		if r.flagsArg >= 0 {
			return "O_CREAT with a mode that has S_ISUID or S_ISGID"
		}
		return "mode has S_ISUID or S_ISGID"
	case socketFamily, socketPair:
		var names []string
		for _, v := range r.values {
			names = append(names, familyName(v))
		}
		s := "domain is none of " + strings.Join(names, ", ")
		if r.check == socketFamily {
			var protos []string
			for _, v := range netlinkProtocols {
				protos = append(protos, netlinkName(v))
			}
			s += ", or is AF_NETLINK and protocol is none of " + strings.Join(protos, ", ")
			if r.tcpOnly {
				s += ", or is AF_INET or AF_INET6 and is not a TCP stream socket"
			}
		}
		if r.check == socketPair {
			if !slices.Contains(r.values, unix.AF_UNIX) {
				s = "domain is none of AF_UNIX, " + strings.Join(names, ", ") +
					", or is AF_UNIX and type is neither SOCK_STREAM nor SOCK_SEQPACKET"
			}
		}
		return s
	}
	return "always"
}

// DeniedSyscalls is the table the filter for f enforces on this architecture (empty where
// SeccompSupported is false).
func DeniedSyscalls(f Filter) []DeniedSyscall {
	if !SeccompSupported() {
		return nil
	}
	var out []DeniedSyscall
	for _, r := range denyTable(f) {
		out = append(out, DeniedSyscall{Name: r.name, When: r.when(), Errno: unix.ErrnoName(r.errno), Why: r.why})
	}
	return out
}

// modeRule: syscall nr takes a mode in argument modeArg; flagsArg >= 0 means the mode only
// counts when that argument has O_CREAT.
type modeRule struct {
	name              string
	nr                int
	modeArg, flagsArg int
}

// asm is a tiny BPF assembler with forward labels.
type asm struct {
	prog   []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string
}

func (a *asm) label(name string) { a.labels[name] = len(a.prog) }

func (a *asm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

// jump adds a conditional jump to labels jt/jf ("" = next instruction).
func (a *asm) jump(code uint16, k uint32, jt, jf string) {
	a.fixups = append(a.fixups, fixup{at: len(a.prog), jt: jt, jf: jf})
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

// dispatchEntry is where the filter sends one syscall number.
type dispatchEntry struct {
	nr     uint32
	target string
}

// linearDispatchForTest builds the dispatch as a chain of comparisons (the reference the
// search is tested against).
var linearDispatchForTest bool

// search emits a binary search over es (sorted by number, the number in the accumulator):
// each entry's number jumps to its target, any other to miss. Every jump is forward.
func (a *asm) search(es []dispatchEntry, miss string, n *int) {
	const (
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	)
	if len(es) <= 4 {
		for j, e := range es {
			if j < len(es)-1 {
				a.jump(jeq, e.nr, e.target, "")
			} else {
				a.jump(jeq, e.nr, e.target, miss)
			}
		}
		return
	}
	mid := len(es) / 2
	*n++
	upper := fmt.Sprint("search", *n)
	a.jump(jge, es[mid].nr, upper, "")
	a.search(es[:mid], miss, n)
	a.label(upper)
	a.search(es[mid:], miss, n)
}

// retLabel names the return instruction for errno.
func retLabel(e unix.Errno) string { return "ret_" + unix.ErrnoName(e) }

// The classic BPF instructions the filter is built of.
const (
	bpfLD   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJEQ  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJGE  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJSET = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRET  = unix.BPF_RET | unix.BPF_K
	bpfAND  = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
)

// buildFilter is the BPF program for the native architecture.
func buildFilter(f Filter) ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, ErrSeccompArch
	}
	rules := denyTable(f)
	to := newFilterTargets(f)
	a := &asm{labels: map[string]int{}}
	a.stmt(bpfLD, offArch)
	a.jump(bpfJEQ, auditArch, "", retLabel(unix.ENOSYS))
	a.stmt(bpfLD, offNr)
	a.jump(bpfJGE, x32Bit, retLabel(unix.ENOSYS), "")
	a.dispatch(f, rules, to)
	a.label("unruled")
	a.stmt(bpfRET, unix.SECCOMP_RET_ALLOW)
	errnos := map[unix.Errno]bool{unix.ENOSYS: true}
	for i, r := range rules {
		errnos[r.errno] = true
		if r.check == always || r.check == enosysAlways {
			continue
		}
		a.label(fmt.Sprint("rule", i))
		a.ruleBlock(f, i, r, to)
	}
	a.label("allow")
	a.stmt(bpfRET, unix.SECCOMP_RET_ALLOW)
	if f.Notify || f.Trace || f.ConnectCheck {
		a.label("ret_notif")
		a.stmt(bpfRET, unix.SECCOMP_RET_USER_NOTIF)
	}
	for _, e := range []unix.Errno{unix.EACCES, unix.EPERM, unix.ENOSYS} {
		if errnos[e] {
			a.label(retLabel(e))
			a.stmt(bpfRET, unix.SECCOMP_RET_ERRNO|uint32(e))
		}
	}
	return a.resolve()
}

// filterTargets says where the program sends a refused call and a call no rule refuses:
// Notify and Trace move them from the filter's own answer to the listener.
type filterTargets struct {
	f      Filter
	traced map[int]bool
}

func newFilterTargets(f Filter) filterTargets {
	traced := map[int]bool{}
	if f.Trace {
		for _, t := range traceCalls {
			traced[t.nr] = true
		}
	}
	return filterTargets{f: f, traced: traced}
}

// notified is where a refusal with errno e goes (the listener, under Notify/Trace).
func (t filterTargets) notified(e unix.Errno) string {
	if (t.f.Notify || t.f.Trace) && e != unix.ENOSYS {
		return "ret_notif"
	}
	return retLabel(e)
}

// pass is where a call that no rule refuses goes: on, or to the listener when traced.
func (t filterTargets) pass(nr int) string {
	if t.traced[nr] {
		return "ret_notif"
	}
	return "allow"
}

// dispatch emits the jump from each ruled syscall number to where it goes: an
// unconditional rule straight to its return, a conditional one to its own block (emitted
// after, so every jump is forward), a traced or connect-checked call to the listener; any
// other number falls through to "unruled".
//
// The numbers are searched as a binary tree, not compared one after another: the kernel runs
// the filter for every syscall number when it installs it (to learn which ones it always
// allows), so its cost on every launch grows with the path an allowed number takes through
// it. A chain of 70 comparisons took 85 µs per install, a search of ~9 about 20.
func (a *asm) dispatch(f Filter, rules []rule, to filterTargets) {
	var entries []dispatchEntry
	ruled := map[int]bool{}
	for i, r := range rules {
		if ruled[r.nr] {
			continue // the first rule of a number decides, as in a chain
		}
		ruled[r.nr] = true
		target := fmt.Sprint("rule", i)
		if r.check == always {
			target = to.notified(r.errno)
		} else if r.check == enosysAlways {
			target = retLabel(r.errno)
		}
		entries = append(entries, dispatchEntry{nr: uint32(r.nr), target: target})
	}
	for _, t := range traceCalls {
		if f.Trace && !ruled[t.nr] {
			ruled[t.nr] = true
			entries = append(entries, dispatchEntry{nr: uint32(t.nr), target: "ret_notif"})
		}
	}
	if f.ConnectCheck && !ruled[unix.SYS_CONNECT] {
		ruled[unix.SYS_CONNECT] = true
		entries = append(entries, dispatchEntry{nr: uint32(unix.SYS_CONNECT), target: "ret_notif"})
	}
	if linearDispatchForTest {
		for _, e := range entries {
			a.jump(bpfJEQ, e.nr, e.target, "")
		}
	} else {
		slices.SortFunc(entries, func(x, y dispatchEntry) int { return cmp.Compare(x.nr, y.nr) })
		n := 0
		a.search(entries, "unruled", &n)
	}
}

// ruleBlock emits the block of conditional rule i (labelled by the caller): the checks of
// its arguments, each ending in a jump to deny or allow.
func (a *asm) ruleBlock(f Filter, i int, r rule, to filterTargets) {
	deny, allow := to.notified(r.errno), to.pass(r.nr)
	// unixDeny is where a refused AF_UNIX socket or pair goes. Not rare: glibc's name
	// service asks nscd over an AF_UNIX socket in ordinary runs (every getpwuid),
	// syslog(3) another. Answered in the filter, as without recording; trace mode
	// records them. The other families are rare and recorded.
	unixDeny := deny
	if !f.Trace {
		unixDeny = retLabel(r.errno)
	}
	switch r.check {
	case anyBit:
		a.stmt(bpfLD, argLow(0))
		a.jump(bpfJSET, r.values[0], deny, allow)
	case anyBitArg:
		a.stmt(bpfLD, argLow(r.modeArg))
		a.jump(bpfJSET, r.values[0], deny, allow)
	case oneOf, noneOf:
		a.stmt(bpfLD, argLow(0))
		match, miss := deny, allow
		if r.check == noneOf {
			match, miss = allow, deny
		}
		for j, v := range r.values {
			if j < len(r.values)-1 {
				a.jump(bpfJEQ, v, match, "")
			} else {
				a.jump(bpfJEQ, v, match, miss)
			}
		}
	case setIDMode:
		if r.flagsArg >= 0 {
			a.stmt(bpfLD, argLow(r.flagsArg))
			a.jump(bpfJSET, unix.O_CREAT, "", allow)
		}
		a.stmt(bpfLD, argLow(r.modeArg))
		a.jump(bpfJSET, setIDBits, deny, allow)
	case socketFamily, socketPair:
		a.socketBlock(i, r, deny, allow, unixDeny)
	case denyClone3:
		a.stmt(bpfRET, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	}
}

// socketBlock emits the block of a socket or socketpair rule (i): the family, and for the
// families that are checked further (netlink, TCP-only inet, an AF_UNIX pair) their own
// sub-blocks. Apart from ruleBlock because it is most of the program's branching.
func (a *asm) socketBlock(i int, r rule, deny, allow, unixDeny string) {
	// An allow-list of families: every family not named is refused, AF_UNIX (when
	// not in values) apart. socketpair of AF_UNIX is checked on its type.
	unixPair := fmt.Sprint("rule", i, "_unixpair")
	netlink := fmt.Sprint("rule", i, "_netlink")
	inet := fmt.Sprint("rule", i, "_inet")
	a.stmt(bpfLD, argLow(0))
	if !slices.Contains(r.values, unix.AF_UNIX) {
		to := unixDeny
		if r.check == socketPair {
			to = unixPair
		}
		a.jump(bpfJEQ, unix.AF_UNIX, to, "")
	}
	for j, v := range r.values {
		to := allow
		if v == unix.AF_NETLINK && r.check == socketFamily {
			to = netlink // and then its protocol (a pair of it the kernel refuses)
		}
		if (v == unix.AF_INET || v == unix.AF_INET6) && r.tcpOnly {
			to = inet // and then its type and protocol
		}
		if j < len(r.values)-1 {
			a.jump(bpfJEQ, v, to, "")
		} else {
			a.jump(bpfJEQ, v, to, deny)
		}
	}
	if r.check == socketFamily && slices.Contains(r.values, unix.AF_NETLINK) {
		a.label(netlink)
		a.stmt(bpfLD, argLow(2))
		for j, v := range netlinkProtocols {
			if j < len(netlinkProtocols)-1 {
				a.jump(bpfJEQ, v, allow, "")
			} else {
				a.jump(bpfJEQ, v, allow, deny)
			}
		}
	}
	if r.tcpOnly {
		// A TCP stream socket only: type SOCK_STREAM, protocol 0 or IPPROTO_TCP
		// (SOCK_STREAM with IPPROTO_SCTP or IPPROTO_MPTCP is no TCP to Landlock).
		a.label(inet)
		a.stmt(bpfLD, argLow(1))
		a.stmt(bpfAND, sockTypeMask)
		a.jump(bpfJEQ, unix.SOCK_STREAM, "", deny)
		a.stmt(bpfLD, argLow(2))
		a.jump(bpfJEQ, 0, allow, "")
		a.jump(bpfJEQ, unix.IPPROTO_TCP, allow, deny)
	}
	if r.check == socketPair && !slices.Contains(r.values, unix.AF_UNIX) {
		// An allow-list of types, not a deny of SOCK_DGRAM: the kernel creates a
		// datagram pair for SOCK_RAW too, and may learn other aliases.
		a.label(unixPair)
		a.stmt(bpfLD, argLow(1))
		a.stmt(bpfAND, sockTypeMask)
		a.jump(bpfJEQ, unix.SOCK_STREAM, allow, "")
		a.jump(bpfJEQ, unix.SOCK_SEQPACKET, allow, unixDeny)
	}
}

// InstallFilter installs the filter on the calling thread only (inherited by what it forks
// and execs). no_new_privs must already be set on this thread. Where the architecture has
// no filter (SeccompSupported false) it does nothing: the sandbox reports that as degraded
// before it gets here. f.Notify and f.Trace are not allowed here (use InstallNotifyFilter).
func InstallFilter(f Filter) error {
	if !SeccompSupported() {
		return nil
	}
	if f.Notify || f.Trace {
		return errors.New("seccomp: a filter with a listener needs InstallNotifyFilter")
	}
	_, err := install(f, 0)
	return err
}

// programs holds the built program of every Filter value used so far (at most 2^5 of
// them): building one is about 50 µs and 170 allocations, on every launch thread, for the
// same answer. A program is only read once built (the kernel copies it on install).
var programs sync.Map // Filter -> []unix.SockFilter

func program(f Filter) ([]unix.SockFilter, error) {
	if p, ok := programs.Load(f); ok {
		return p.([]unix.SockFilter), nil
	}
	p, err := buildFilter(f)
	if err != nil {
		return nil, err
	}
	programs.Store(f, p)
	return p, nil
}

func install(f Filter, flags uintptr) (int, error) {
	prog, err := program(f)
	if err != nil {
		return -1, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: %w", errno)
	}
	return int(r), nil
}

// SeccompSupported reports whether this architecture has the filter.
func SeccompSupported() bool { return auditArch != 0 }

// UnixSocketFilterSupported is SeccompSupported (kept for callers that ask about sockets).
func UnixSocketFilterSupported() bool { return SeccompSupported() }
