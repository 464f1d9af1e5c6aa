// SPDX-License-Identifier: MIT

// Package kernel holds the Linux kernel primitives fledge confines a process with:
// Landlock rulesets, the seccomp filter and the capability drop. Each is applied to the
// calling OS thread only (the stub's single thread before execve, or the thread launcher's
// throwaway thread before fork), never to the whole host process.
//
// It is a leaf: it imports nothing of fledge, so both the re-exec stub (sandbox/stub) and
// the Linux sandbox (sandbox/linux) build on it. On other systems the same API exists and
// reports the primitives as unavailable.
package kernel

import "errors"

// Landlock is the Landlock part of a launch policy. ABI is the ruleset ABI to build (the
// host probes the kernel once); nothing asks for more than the kernel has. It is JSON on
// the stub's policy pipe.
type Landlock struct {
	ABI       int      `json:"abi"`
	ReadWrite []string `json:"rw,omitempty"`
	ReadOnly  []string `json:"ro,omitempty"`
	ReadExec  []string `json:"rx,omitempty"`
	// DenyNet handles TCP (and UDP on ABI >= 10) bind/connect with no port allowed.
	DenyNet bool `json:"deny_net,omitempty"`
	// BindTCP are ports that may still be bound under DenyNet (ABI >= 4): a plugin serving
	// its protocol on one loopback port, which connects nowhere.
	BindTCP []uint16 `json:"bind_tcp,omitempty"`
	// BindAnyTCP leaves TCP bind unhandled under DenyNet (connect stays denied): set only for
	// a run in its own network namespace, where any port it binds is out of everyone's reach.
	BindAnyTCP bool `json:"bind_any_tcp,omitempty"`
	// ConnectTCP are ports that may still be connected to under DenyNet (ABI >= 4): the
	// session's proxy on the host's loopback, where a run has no network namespace.
	// Landlock matches the port, not the address.
	ConnectTCP []uint16 `json:"connect_tcp,omitempty"`
	// Deny are paths no rule may cover (each in its lexical and its resolved form): every
	// allowed path is checked where it was opened for its rule, so what is checked is what
	// the rule grants, whatever a symlink on the way says a moment later.
	Deny []string `json:"deny,omitempty"`
	// Scope signals and abstract unix sockets to the domain (ABI >= 6).
	Scope bool `json:"scope,omitempty"`
	// LogExec asks the kernel to log denials of exec'd programs (ABI >= 7).
	LogExec bool `json:"log_exec,omitempty"`
	// ProcFD, when above 2 (stdio never is one), is a detached procfs that views mount
	// copies of at /proc (View.ProcTree): it is granted read-only like a path. Copies
	// share its superblock, so the one rule covers them all. Only the thread launcher sets
	// it (an fd of the host); ProcKey names that procfs (dev:ino) in the cache key, so a
	// ruleset is per procfs, whatever fd number it comes through.
	ProcFD  int    `json:"-"`
	ProcKey string `json:"proc_key,omitempty"`
}

// Filter says which optional parts of the filter a launch wants.
type Filter struct {
	// DenyUnix refuses to create AF_UNIX sockets (EACCES).
	DenyUnix bool
	// TCPOnly refuses IPv4 and IPv6 sockets other than TCP (UDP, ICMP, SCTP, MPTCP, raw)
	// and a connect by sendto/sendmsg (TCP Fast Open's MSG_FASTOPEN, which no connect hook
	// sees): for a run without a network namespace of its own, whose only network bound is
	// Landlock's TCP rules (which see connect(2), and TCP only).
	TCPOnly bool
	// ConnectCheck sends every connect(2) to the listener (ServeNotifyConnect), which lets
	// a TCP socket connect to the host's loopback on the allowed ports only: Landlock's
	// rule is a port, at any address. Without a listener connect answers ENOSYS (closed).
	ConnectCheck bool
	// Notify answers the deny-list's refusals (its EPERM and EACCES rows) through a seccomp
	// user-notification listener instead of in the filter, so the host sees each one (pid,
	// syscall, arguments) and records it. Only refused calls reach the listener, so a run
	// that is refused nothing pays nothing; the answer is the same errno. The ENOSYS rows
	// (clone3, openat2, foreign ABIs) stay in the filter: libc meets them in ordinary runs
	// and falls back, they are no refusal of anything. So do the AF_UNIX socket rows
	// unless Trace is set: glibc's name service (nscd) and syslog(3) meet them in ordinary
	// runs too.
	Notify bool
	// Trace also sends the path and connect syscalls (TraceSyscalls) to the listener, which
	// reads what they name, records what lies outside the grants and lets every one of them
	// continue: observation only, the kernel decides as without it.
	Trace bool
}

// DeniedSyscall is one row of the table as the sandbox reports it.
type DeniedSyscall struct {
	Name  string `json:"name"`
	When  string `json:"when"`
	Errno string `json:"errno"`
	Why   string `json:"why"`
}

// ViewMount is one granted path.
type ViewMount struct {
	Path     string `json:"path"`
	Writable bool   `json:"w,omitempty"`
	// System marks a system path (/usr, /etc, ...): with View.IDMap set, a read-only one is
	// shown as an ordinary user sees it, root's files being nobody's (rootonly_linux.go).
	System bool `json:"sys,omitempty"`
}

// ViewFile is a file of the host shown at a path of the view.
type ViewFile struct {
	Path   string `json:"path"`   // where, in the view
	Source string `json:"source"` // the host's file (its last element no symlink)
}

// View is what the child sees.
type View struct {
	Mounts []ViewMount `json:"mounts"`
	// Protected paths stay read-only even inside a writable mount; each is made a mount
	// point so it cannot be removed or renamed away. Missing ones are skipped.
	Protected []string `json:"protected,omitempty"`
	// Pin are directories made mount points of their own (rename(2) and rmdir refuse a
	// mount point): the .git directory holding protected paths, so a command cannot move
	// it aside and put a fresh one with hooks in its place.
	Pin []string `json:"pin,omitempty"`
	// Writable are directories inside a Protected one that are bound again writable on top
	// of it (a submodule's git directory inside a read-only modules/): what lies beneath
	// them is read-only again only where Protected says so.
	Writable []string `json:"writable,omitempty"`
	// Dir is the working directory (by path, inside the view) with the identity it must
	// have; a handle opened outside the view would lead back out of it.
	Dir    string `json:"dir,omitempty"`
	DirDev uint64 `json:"dir_dev,omitempty"`
	DirIno uint64 `json:"dir_ino,omitempty"`
	// ProcTree, when above 2, is a detached procfs of the run's pid namespace (made by the
	// namespace's holder): a copy of it is mounted at /proc instead of binding the host's,
	// so a command sees its own session's processes only. An fd of the launching process.
	ProcTree int `json:"-"`
	// RunTmp is the run's own TMPDIR (also among Mounts, writable): a view template
	// leaves it out and binds it per run.
	RunTmp string `json:"run_tmp,omitempty"`
	// ProcNew mounts a fresh proc at /proc (read-only, nosuid, nodev, noexec) instead of
	// binding the host's: it shows the pid namespace the view is built in, so a run in its
	// own pid namespace sees only its own processes. Mounts must then not list /proc.
	ProcNew bool `json:"proc_new,omitempty"`
	// IDMap, when above 2, is a user namespace fd (of the process that builds the view)
	// whose mapping shows uid and gid 0 as 65534: read-only System mounts are idmapped
	// through it, so a command of a root fledge reads of them only what others may.
	IDMap int `json:"idmap,omitempty"`
	// ProcMask names files at the top of the view's /proc that an empty, unreadable file
	// covers (RootOnlyProc: what a root fledge's commands, uid 0, must not read there).
	ProcMask []string `json:"proc_mask,omitempty"`
	// Files are shown in place of what the grants show at their paths (a CA bundle at the
	// system bundle paths): each bound over the file at its Path, read-only, nosuid, nodev,
	// noexec, on top of every other mount, the working directory's included. A Path that
	// is not a regular file in the view (not granted, gone, reached through a symlink) is
	// skipped: nothing is shown there that the grants did not show.
	Files []ViewFile `json:"files,omitempty"`
	// Root, when set, is a directory of the host (an unpacked image) shown as the view's
	// root instead of an empty tmpfs: a read-only overlay whose upper layer is a skeleton
	// of fledge's own (a directory for every mount point, /proc, /dev, /tmp), so no mount
	// point is ever looked up through the image's symlinks and nothing is written into it.
	// Dir is then a path inside the image, entered by path (DirDev and DirIno zero).
	Root string `json:"root,omitempty"`
}

// ErrUnsupported: the primitive does not exist on this operating system.
var ErrUnsupported = errors.New("kernel primitive not available on this OS")

// Notice is one call a seccomp listener saw that the host should record: a refusal of the
// deny-list (Filter.Notify), or an access outside the grants (Filter.Trace).
type Notice struct {
	Pid     int
	Syscall string
	// Denied: a deny-list row refused it, with Errno; When is that row's condition.
	Denied bool
	Errno  string
	When   string
	// A traced access: Path (absolute where it could be resolved) and Access (read,
	// write, exec, stat, connect); Address for connect ("203.0.113.7:443", "[::1]:80").
	Path    string
	Access  string
	Address string
	// Object: what a refused call asked for, where the call names it in its arguments
	// (a socket's family, type and protocol).
	Object string
}

// Grants is a run's view of what it may reach, for deciding which traced accesses the
// kernel refuses: the Landlock lists and whether the network is open.
type Grants struct {
	ReadWrite, ReadOnly, ReadExec []string
	Network                       bool
}

// ErrListenerBusy: the kernel allows one seccomp listener per filter chain and an
// enclosing sandbox's filter has it (fledge running inside fledge).
var ErrListenerBusy = errors.New("seccomp listener: an enclosing filter already has one")

// LandlockDenial is one denial Landlock logged for a watched run.
type LandlockDenial struct {
	// Blockers are the rights that were missing, as the kernel names them
	// ("fs.read_file", "fs.write_file,fs.truncate", "net.connect_tcp", "scope.signal").
	Blockers string
	Path     string // the object, when the record names a path (path="...")
	Object   string // the record's other object fields (dev, ino, dest port ...), as logged
}
