// SPDX-License-Identifier: MIT

// Package sandbox defines how fledge runs untrusted code: the Spec of what a process may
// touch, the Sandbox that enforces it, and the Result of a run. The enforcement is chosen per
// OS in sandbox/platform (Landlock + cgroups on Linux, Seatbelt on macOS, a restricted
// fallback elsewhere); this package imports no OS-specific code.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Kind says what is being run; profiles and audit records differ between them.
type Kind string

const (
	KindExec   Kind = "exec"   // a shell command a plugin asked for
	KindPlugin Kind = "plugin" // the plugin process itself
	KindLegacy Kind = "legacy" // a legacy (non-protocol) plugin run as a whole program
)

// Access is the filesystem allow-list. Paths are absolute; directories cover their subtree.
type Access struct {
	ReadWrite []string // read, write, create, remove
	ReadOnly  []string // read files and list directories
	ReadExec  []string // read and execute
	// Protected are paths inside ReadWrite roots that stay read-only and cannot be removed
	// or renamed away (Linux private filesystem view), so a command cannot plant a hook or
	// an fsmonitor/alias the user's next git would run. nil means the default, computed at
	// every launch from what is on disk: every route to a git hook or config of the
	// repositories in the ReadWrite roots (.git/hooks, .git/config, config.worktree, the
	// .git file of a worktree or submodule and its git directory's hooks/config/commondir,
	// submodule git directories under .git/modules, core.hooksPath; see
	// docs/guarantees.md). A non-nil list is used as given (an empty one opts out of all).
	Protected []string
	// Unprotect removes entries from the default set (nil Protected): each is a path
	// relative to the writable root it lies in, with * matching within one element
	// (".git/config", ".git/modules/*/hooks"), or UnprotectHooksPath. Policy fills it from
	// [sandbox] unprotect; ValidUnprotect checks an entry. Ignored when Protected is set.
	Unprotect []string
	// Deny lists paths that must stay unreachable even if an allow entry covers them (the
	// fledge config and state dirs). Landlock cannot subtract, so the Linux sandbox refuses a
	// Spec whose allow entries contain a Deny path; Seatbelt emits explicit deny rules.
	Deny []string
}

// Limits bound a run. Zero means "no limit" for each field, except KillGrace (default 2 s).
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPU         float64 // cores (e.g. 0.5); 0 = unlimited
	NoFile      uint64  // RLIMIT_NOFILE
	Timeout     time.Duration
	KillGrace   time.Duration
}

// Spec is one process to run under confinement.
type Spec struct {
	Kind Kind
	// Name labels the run (plugin name); used in cgroup names and messages. Sanitised by the
	// sandbox, never trusted as a path.
	Name string
	// Path and Args are the program to run once confinement is in place (Args[0] included).
	// For an exec: Path "/bin/sh", Args ["sh", "-c", command].
	Path string
	Args []string
	// Dir is an open handle to the working directory, already proven by pathguard. The child
	// changes into it with fchdir; the path string is never re-resolved. DirPath is for
	// display and for profiles only.
	Dir     *os.File
	DirPath string
	// Env is the complete environment (already filtered by policy). The sandbox adds TMPDIR
	// when PrivateTmp is set.
	Env []string
	// SecretNames name the variables of Env that are secrets the user granted: for the
	// run's record, which names them and never shows their values. The sandbox does nothing
	// with them.
	SecretNames []string
	// Stdin nil means /dev/null. Stdout/Stderr nil means discard. When they are *os.File they
	// are passed straight to the child; otherwise the sandbox copies through pipes and stops
	// copying as soon as the process tree is gone.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Access Access
	// Network false blocks TCP connect/bind (and, where possible, all networking).
	Network bool
	// Egress, with Network false, gives the run the network of its plugin's grant by
	// destination (an *egress.Session; Linux: a namespace whose only way out is fledge,
	// sandbox/netstack); nil with Network false is no network at all. Every run of one
	// session shares it.
	Egress Egress
	// ListenTCP are TCP ports the process may bind (to listen on) while Network is false;
	// it still connects nowhere. Linux: Landlock NET_BIND_TCP rules (ABI >= 4), in the
	// run's own network namespace when there is one (so only the host, entering it, can
	// reach the port). Other platforms do not support it: the bind is refused there.
	ListenTCP []uint16
	// ListenAnyTCP lets the process bind any TCP port while Network is false, but only in
	// the run's own network namespace (Linux, where the sandbox makes one): nothing outside
	// that namespace reaches its ports (only the host, entering it), so a program that
	// binds port 0 or a port of its own choosing is harmless there. It still connects
	// nowhere. Without such a namespace it is ignored and ListenTCP alone applies.
	ListenAnyTCP bool
	// UnixSockets allows creating unix-domain sockets. False (the default) refuses them, on
	// Linux by seccomp: a path-based unix socket (docker.sock, D-Bus, systemd) is a way out
	// that neither Landlock below ABI 9 nor a network namespace closes.
	UnixSockets bool
	Limits      Limits
	// PrivateTmp makes a fresh private temp dir, read-write, exported as TMPDIR, removed after.
	PrivateTmp bool
	// TrustBundle, when set, is the absolute path of a CA bundle file (PEM) the host wrote
	// for the run: where the run has a private filesystem view (Linux), each of
	// SystemCABundles that exists on the host, and the file each resolves to through
	// symlinks, shows this file's content in the view, read-only. Programs that read the
	// system bundle directly (OpenSSL's default paths) then trust what it holds. Elsewhere
	// (no view: Landlock alone, macOS, the fallback) it is ignored; the run's environment
	// (SSL_CERT_FILE and the like) is what remains.
	TrustBundle string
	// Strict refuses to run (ErrUnavailable) instead of degrading when a promised restriction
	// cannot be enforced.
	Strict bool
	// BeforeExec, when set, runs after the sandbox is prepared and immediately before the
	// program is started; an error aborts the start (ErrLaunch). The host uses it to wait
	// for the audit decision record to be durable while the sandbox is being set up,
	// keeping "audit before act" without paying the fsync and the setup one after the
	// other. It may run on the launching thread after confinement was applied to it: it
	// must only wait for work done elsewhere, never touch files itself.
	BeforeExec func() error
	// KernelDenials, when set, is told what the kernel refused the run (Linux with seccomp
	// user notification; never called elsewhere): every call on the seccomp deny-list and,
	// with Trace, every path and network destination outside the grants. Rate-limited per
	// run (DenialLog): the first of each kind at once, a repeat only counted, and the true
	// count once the run has ended. Called from the sandbox's own goroutine, never
	// concurrently for one run; it must not block for long.
	KernelDenials func(KernelDenial)
	// KernelDenialsLate, when set with KernelDenials, lets Wait return before the run's
	// last Landlock refusals have arrived. They come through the kernel's audit, which
	// delivers them after the run's processes made them: a quarter of a second at most
	// after the run's end where fledge can ask the kernel how much is still queued, and
	// until none came for a while where it cannot (a host in a pid namespace of its own,
	// such as a container). Waiting for them held every exec's reply that long. Wait calls
	// it once, before it returns, with a channel closed when they had their chance and the
	// run's true counts were reported; KernelDenials may be called until then. Nil: Wait
	// waits for them itself.
	KernelDenialsLate func(settled <-chan struct{})
	// Root, when set, is the absolute path of a directory on the host (an unpacked
	// container image) shown as the root of the run's private filesystem view, read-only,
	// nosuid, nodev: no system path of the host is shown then, only what Access grants
	// (bound at its host path on top of the image), /proc, the harmless devices and the
	// private /tmp. Path is looked up inside it (through Env's PATH when it has no "/").
	// Only a backend with a private filesystem view (Linux) can do it; the others refuse
	// such a spec (ErrUnavailable) rather than run the program against the host's files.
	Root string
	// RootDir is the working directory inside Root (absolute, "" = "/"); Dir is then only
	// opened, never entered.
	RootDir string
	// Trace observes every path and connect syscall of the run and reports those the
	// grants do not cover (KernelDenials): observation only, every call continues and the
	// kernel decides it as without trace. Costs a round trip to the host per such call.
	Trace bool
}

// SystemCABundles are where the systems fledge runs on keep the CA bundle their TLS
// libraries read by default (the places Spec.TrustBundle is shown at). Paths that are
// symlinks there (OpenSSL's /usr/lib/ssl/cert.pem on Debian) are covered through what they
// resolve to.
var SystemCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // Fedora, RHEL: what the above resolves to
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/ssl/cert.pem",                                 // Alpine, macOS, BSDs
	"/usr/lib/ssl/cert.pem",                             // OpenSSL's default on Debian, Ubuntu
	"/etc/pki/tls/cert.pem",                             // OpenSSL's default on Fedora, RHEL
}

// Egress is a plugin session's network by destination. The interface keeps this package
// free of fledge imports; the backends take the *egress.Session it holds.
type Egress interface {
	Close() error
}

// ErrNoImageRoot: a spec with a Root on a backend that cannot show a directory as the root
// of a private filesystem view.
var ErrNoImageRoot = fmt.Errorf("%w: an image as the filesystem root needs the Linux private filesystem view", ErrUnavailable)

// RunBeforeExec calls spec.BeforeExec if set; sandboxes call it right before launching.
func RunBeforeExec(spec *Spec) error {
	if spec.BeforeExec == nil {
		return nil
	}
	if err := spec.BeforeExec(); err != nil {
		return fmt.Errorf("%w: before exec: %w", ErrLaunch, err)
	}
	return nil
}

// Process is a started, confined process tree.
type Process interface {
	// Pid of the main process (0 if unknown).
	Pid() int
	// Wait returns once the main process has exited and every other process of its tree is
	// gone. It returns promptly even if a descendant still held the output pipes.
	Wait() (*Result, error)
	// Signal sends sig to the main process only (used for the plugin's graceful SIGTERM).
	Signal(sig os.Signal) error
	// Kill ends the whole tree now (SIGKILL to every member).
	Kill() error
}

// Interrupter is a Process that can deliver a terminal's interrupt as the terminal would:
// SIGINT to every process of the run's process group at once. A plugin runs in a session of
// its own (never on the user's terminal), so Ctrl+C reaches it only this way; programs
// written for a host that leaves them on the terminal expect it (bash dies in its read,
// Python raises KeyboardInterrupt).
type Interrupter interface {
	Interrupt() error
}

// Result says how a run ended and what the sandbox saw.
type Result struct {
	ExitCode   int    // the main process's exit code; 128+n when killed by signal n
	Signal     string // e.g. "SIGKILL" when killed by a signal
	TimedOut   bool
	Cancelled  bool // the context was cancelled
	OOMKilled  bool
	Killed     int   // processes the sandbox had to kill (survivors, timeout, cancel)
	PeakMemory int64 // bytes; 0 when unknown
	// Trap is why a WASM module trapped (unreachable, out-of-bounds access, ...); "" otherwise.
	Trap     string
	Duration time.Duration
	Mode     Mode
	// Quarantined are the nested git repositories (or indexes) the run armed and the
	// sandbox moved aside when it ended (Linux; docs/guarantees.md, "Nested repositories").
	Quarantined []Quarantine
}

// Quarantine is a .git (or an index) a run left where the user's git would run code from
// it, and where it was moved.
type Quarantine struct {
	Path       string `json:"path"`               // where it was
	MovedTo    string `json:"moved_to,omitempty"` // where it is now ("" when the move failed)
	Repository string `json:"repository"`         // the checkout whose index records it
	Why        string `json:"why"`                // what was wrong
	Err        string `json:"error,omitempty"`    // why it could not be moved
}

// Mode describes the confinement actually applied to one run (for results and audit).
type Mode struct {
	Confinement string   `json:"confinement"` // landlock | seatbelt | none
	LandlockABI int      `json:"landlock_abi,omitempty"`
	Cgroup      string   `json:"cgroup"`    // v2 | hybrid | v1 | none
	TreeKill    string   `json:"tree_kill"` // cgroup.kill | freezer | pgroup+subreaper | pgroup
	NetNS       bool     `json:"netns,omitempty"`
	Degraded    []string `json:"degraded,omitempty"` // promised restrictions not enforced
}

// Report is what this machine can enforce (for `fledge doctor`).
type Report struct {
	OS             string `json:"os"`
	Kernel         string `json:"kernel,omitempty"`
	Confinement    string `json:"confinement"`
	LandlockABI    int    `json:"landlock_abi"`
	CgroupMode     string `json:"cgroup_mode"` // v2 | hybrid | v1 | none
	CgroupWritable bool   `json:"cgroup_writable"`
	CgroupPath     string `json:"cgroup_path,omitempty"`
	UserNamespaces bool   `json:"user_namespaces"`
	NetworkDeny    string `json:"network_deny"` // how network=deny is enforced
	// NetworkEgress says how a grant by destination is enforced ("netns+tun: ..." or
	// "none: why"; without it such a plugin gets no network at all).
	NetworkEgress  string `json:"network_egress,omitempty"`
	UnixSocketDeny string `json:"unix_socket_deny"` // how unix sockets are refused (seccomp | seatbelt | none)
	TreeKill       string `json:"tree_kill"`
	// KernelRefusals says how what the kernel refuses a plugin reaches the audit log:
	// "seccomp-notify" (the deny-list's refusals are kernel_denied records, but its ENOSYS
	// answers, and refused AF_UNIX sockets outside trace mode; trace mode works) or "none".
	KernelRefusals string `json:"kernel_refusals,omitempty"`
	// LandlockAudit says whether the kernel logs Landlock's own denials in its audit
	// (ABI 7+) and whether fledge records them: "recorded" (audit enabled, and fledge
	// reads the records, CAP_AUDIT_READ: kernel_denied kind landlock), "kernel-audit"
	// (audit enabled, fledge does not read it), "off" (audit disabled), "unknown" (could
	// not be asked: not root, or not in the initial pid namespace), or "none" (Landlock
	// below ABI 7 or absent).
	LandlockAudit string `json:"landlock_audit,omitempty"`
	// HostDeath says what ends every sandboxed process if fledge itself dies by a signal
	// (kill -9, OOM killer): "watchdog" (a separate process that kills every registered
	// cgroup and process group when the host's pipe closes) or "none".
	HostDeath string `json:"host_death"`
	// FilesystemView says how a command's view of the filesystem is built:
	// "mount-namespace" (only granted paths exist, read-only unless granted writable,
	// private /tmp, protected paths read-only) or "none" (Landlock alone: the rest of the
	// filesystem exists but is unreadable).
	FilesystemView string `json:"filesystem_view"`
	// PidNamespace says whose processes a command sees in /proc: "per-plugin" (its own
	// plugin's session, in a pid namespace of their own) or "none" (the host's, read-only).
	PidNamespace string `json:"pid_namespace,omitempty"`
	// IPCNamespace says whose SysV IPC objects and POSIX message queues a command and a
	// plugin reach: "per-run" (an IPC namespace of their own, gone with the run) or "none"
	// (the host's). Linux only.
	IPCNamespace string `json:"ipc_namespace,omitempty"`
	// SystemFiles says what of the system paths (/etc, /usr, /opt, ...) a command of a root
	// fledge can read: "others-only" (what an ordinary user could: root's files are shown
	// as another user's, so 0600 keys and 0700 directories are closed whatever their
	// names) or "by-name" (only /etc's known secrets are left out). Linux only.
	SystemFiles string `json:"system_files,omitempty"`
	// SeccompDenied is the seccomp deny-list every command and plugin process runs under
	// (empty where there is no filter). Unix sockets appear when refused by default.
	SeccompDenied []DeniedSyscall `json:"seccomp_denied,omitempty"`
	Warnings      []string        `json:"warnings,omitempty"`
}

// DeniedSyscall is one row of the seccomp deny-list: the call, when it is refused (always,
// or for which arguments), the error the caller gets, and why.
type DeniedSyscall struct {
	Name  string `json:"name"`
	When  string `json:"when"`
	Errno string `json:"errno"`
	Why   string `json:"why"`
}

// Sandbox starts confined processes.
type Sandbox interface {
	// Start runs spec. Cancelling ctx kills the whole tree (SIGTERM, KillGrace, SIGKILL) and
	// Wait reports Cancelled. Limits.Timeout does the same and reports TimedOut.
	Start(ctx context.Context, spec *Spec) (Process, error)
	// Report describes what this sandbox can enforce on this machine.
	Report() Report
}

// Preparer is a Sandbox that can start ahead what the first Start of a session would
// otherwise do on its path (helper processes, the run's groups). Prepare returns at once
// and changes nothing a run gets: Start takes what is ready and does the rest itself.
type Preparer interface {
	// Prepare readies the first Start of spec.Name with spec.Limits.
	Prepare(spec *Spec)
}

var (
	// ErrUnavailable: a promised restriction cannot be enforced and the spec is strict.
	ErrUnavailable = errors.New("sandbox unavailable")
	// ErrInvalidSpec: the spec is inconsistent (e.g. an allowed path covers a denied one).
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrLaunch: the process could not be started.
	ErrLaunch = errors.New("launch failed")
)
