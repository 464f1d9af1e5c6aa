// SPDX-License-Identifier: MIT

// Package stub is fledge's re-exec entry point: the first program of every sandboxed child.
//
// The host starts its own executable with Marker as argv[1]. MaybeRun, called as the very
// first statement of main (and of TestMain in test binaries that start sandboxed processes),
// notices the marker and turns the process into the stub: it reads its Policy from an
// inherited fd, applies the confinement steps in a fixed order and execs the real program.
// Every failure before exec is written to a dedicated CLOEXEC error pipe, so the host can
// report launch_failed with a precise cause instead of a bare exit code.
//
// The host half (Launch) lives here too, so every sandbox that re-executes (darwin,
// fallback, and linux with LaunchStub) starts the stub the same way. The kernel steps
// themselves (Landlock, seccomp, capabilities) live in sandbox/kernel, shared with the
// Linux thread launcher.
package stub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// Marker is argv[1] of a stub invocation. It is deliberately unlikely as a user argument.
const Marker = "__fledge_sandbox_stub__"

// Fixed fd numbers in the stub (after stdio). The host passes them through ExtraFiles.
const (
	fdPolicy = 3 // read end of a pipe carrying the JSON Policy
	fdErr    = 4 // write end of the error pipe (made CLOEXEC by the stub)
	fdDir    = 5 // the guarded working directory (optional)
	fdStatus = 6 // write end of the status pipe (Policy.Init only)
	fdIDMap  = 7 // the view's idmapping user namespace (View.IDMap, optional)
	fdNotify = 8 // a socket the stub hands its seccomp listener back on (Policy.Notify)
	fdNet    = 9 // the stub's end of the network hand-off socket (Policy.Net, optional)
)

// Bounds on what crosses the pipes.
const (
	MaxPolicyBytes = 1 << 20 // a policy larger than this is refused
	maxErrBytes    = 4096    // one error message from the stub
)

// execMark is written to the error pipe right before execve.
const execMark = 0x01

// exitStubFailed is the exit status of a stub that failed before exec (the host normally
// reports the error pipe's message instead).
const exitStubFailed = 126

// Policy is everything the stub does before exec. It is JSON on the wire.
type Policy struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`

	// HasDir says fd 5 is the working directory; DirDev/DirIno are its identity as the host
	// saw it (0 = do not check).
	HasDir bool   `json:"has_dir,omitempty"`
	DirDev uint64 `json:"dir_dev,omitempty"`
	DirIno uint64 `json:"dir_ino,omitempty"`

	// NoFile bounds RLIMIT_NOFILE (soft and hard). 0 = DefaultNoFile. RLIMIT_CORE is always 0.
	NoFile uint64 `json:"nofile,omitempty"`

	// CgroupProcs are cgroup.procs files the stub writes its pid into before anything else
	// (cgroup v1 controllers on hybrid/legacy systems; v2 uses CLONE_INTO_CGROUP instead).
	CgroupProcs []string `json:"cgroup_procs,omitempty"`

	// Landlock is the Linux filesystem/network/IPC policy; nil = none.
	Landlock *Landlock `json:"landlock,omitempty"`

	// View is the private filesystem view (Linux mount namespace); nil = none. It replaces
	// the fchdir into fd 5: the view mounts that handle's directory at View.Dir.
	View *kernel.View `json:"view,omitempty"`

	// DenyUnix refuses to create AF_UNIX sockets (seccomp, Linux): no connecting to
	// docker.sock, D-Bus or systemd sockets.
	DenyUnix bool `json:"deny_unix,omitempty"`
	// TCPOnly refuses IPv4/IPv6 sockets other than TCP and TCP Fast Open's connect by
	// sendto (kernel.Filter.TCPOnly): a run without a network namespace of its own.
	TCPOnly bool `json:"tcp_only,omitempty"`
	// ConnectCheck sends connect(2) to the host's listener (kernel.Filter.ConnectCheck):
	// a run whose one TCP destination is the session's proxy.
	ConnectCheck bool `json:"connect_check,omitempty"`

	// Notify (Linux): the deny-list's refusals go to a seccomp listener the stub sends to
	// the host over fd 8 (Launch.Notify) before it execs; Trace adds the path and connect
	// calls (kernel.Filter.Notify, Trace). An enclosing filter that already has a listener
	// makes the stub install the plain filter and close fd 8 (the host then sees EOF).
	Notify bool `json:"notify,omitempty"`
	Trace  bool `json:"trace,omitempty"`

	// AuditName (Linux): the stub names its thread so before it calls
	// landlock_restrict_self, so the kernel's audit logs the run's Landlock domain under
	// it and the host maps the run's denials (kernel.WatchLandlock).
	AuditName string `json:"audit_name,omitempty"`

	// Init (Linux): the stub was started in its own user, mount and pid namespaces (an
	// unprivileged host's private view) and is pid 1 there. It does not exec the program
	// in place, because pid 1 ignores every signal it has no handler for (the host's
	// SIGTERM would be lost) and would have to reap orphans it knows nothing of. It forks
	// the program from its confined thread instead, forwards the host's signals to it,
	// reaps every process of the namespace and hands the program's wait status to the host
	// on fd 6 before it exits (which ends the namespace: nothing outlives the program).
	// The view's working directory is entered by path (checked against the handle's
	// identity): the handle's mount belongs to the host's mount namespace, which a detached
	// copy cannot be taken from.
	Init bool `json:"init,omitempty"`

	// Net (Linux): the stub was cloned into a network namespace of its own (and, unprivileged,
	// the user namespace that owns it) that is to be the run's network by destination. First
	// thing, while it still holds CAP_NET_ADMIN there, it builds the namespace's TUN device,
	// routes and loopback sockets (kernel.BuildEgressNet), sends their fds to the host over
	// fd 8 (SCM_RIGHTS) and waits for the host to say it serves them: the program never runs
	// in a namespace nobody answers. Its own copies are closed before anything else runs.
	Net *kernel.EgressNet `json:"net,omitempty"`
}

// Landlock is the Landlock part of a Policy (defined with the primitives that apply it).
type Landlock = kernel.Landlock

// DefaultNoFile is RLIMIT_NOFILE when the policy does not say.
const DefaultNoFile = 1024

// StepError is a failure inside the stub, as reported through the error pipe.
type StepError struct {
	Step string // e.g. "landlock", "fchdir", "exec"
	Msg  string
}

func (e *StepError) Error() string { return "stub: " + e.Step + ": " + e.Msg }

// ErrStubFailed wraps every StepError the host receives.
var ErrStubFailed = errors.New("sandbox stub failed before exec")

var maybeRunCalled atomic.Bool

// LauncherMarker is argv[1] of a plugin session's launcher (sandbox/linux launcher_linux.go).
const LauncherMarker = "__fledge_sandbox_launcher__"

// launcherMain is the launcher's entry point, registered by the backend that starts it
// (the backend imports this package, not the other way round).
var launcherMain func() int

// RegisterLauncher sets the entry point MaybeRun runs for LauncherMarker.
func RegisterLauncher(main func() int) { launcherMain = main }

// MaybeRunCalled reports whether this process's main (or TestMain) called MaybeRun, so
// that re-executing this executable with a marker is safe (it will not run the program's
// own main instead).
func MaybeRunCalled() bool { return maybeRunCalled.Load() }

// IsStub reports whether args (os.Args) is a stub invocation.
func IsStub(args []string) bool { return len(args) > 1 && args[1] == Marker }

// MaybeRun turns this process into the stub when os.Args[1] is Marker, into the
// host-death watchdog when it is WatchdogMarker, or into a pid-namespace holder when it is
// PidNSMarker, and never returns in those cases;
// otherwise it returns at once. Call it first in main and in TestMain.
func MaybeRun() {
	maybeRunCalled.Store(true)
	if isWatchdog(os.Args) {
		os.Exit(runWatchdog(os.Args))
	}
	if isPidNS(os.Args) {
		os.Exit(runPidNS())
	}
	if len(os.Args) > 1 && os.Args[1] == LauncherMarker {
		if launcherMain == nil {
			os.Exit(exitStubFailed)
		}
		os.Exit(launcherMain())
	}
	if len(os.Args) > 1 && os.Args[1] == ProbeMarker {
		os.Exit(runProbe())
	}
	if !IsStub(os.Args) {
		return
	}
	// Every step that is per-thread (no_new_privs, Landlock) must happen on the thread that
	// finally calls execve, so pin the main goroutine to its thread for good.
	runtime.LockOSThread()
	errPipe := os.NewFile(fdErr, "stub-err")
	if err := run(); err != nil {
		var se *StepError
		if !errors.As(err, &se) {
			se = &StepError{Step: "stub", Msg: err.Error()}
		}
		msg := se.Step + "\x00" + se.Msg
		if len(msg) > maxErrBytes {
			msg = msg[:maxErrBytes]
		}
		// Nobody to tell if this fails; the exit code still says "could not run".
		_, _ = errPipe.Write([]byte(msg))
		os.Exit(exitStubFailed)
	}
	// run only returns nil after a successful exec, which never returns.
	os.Exit(exitStubFailed)
}

func run() error {
	pol, err := readPolicy(os.NewFile(fdPolicy, "stub-policy"))
	if err != nil {
		return &StepError{Step: "policy", Msg: err.Error()}
	}
	if err := markCloexec(fdErr); err != nil {
		return &StepError{Step: "errpipe", Msg: err.Error()}
	}
	return apply(pol)
}

func readPolicy(f *os.File) (*Policy, error) {
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("policy exceeds %d bytes", MaxPolicyBytes)
	}
	var p Policy
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if p.Path == "" || len(p.Args) == 0 {
		return nil, errors.New("empty program")
	}
	return &p, nil
}

// LookPath resolves Policy.Path like the stub does (for launchers that skip the stub).
func LookPath(pol *Policy) (string, error) { return lookPath(pol) }

// lookPath resolves a bare program name against PATH from the child's own environment
// (never the host's), as a shell would.
func lookPath(pol *Policy) (string, error) {
	if strings.Contains(pol.Path, "/") {
		return pol.Path, nil
	}
	path := ""
	for _, kv := range pol.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" || !strings.HasPrefix(dir, "/") {
			continue // relative PATH entries would depend on the guarded cwd; skip them
		}
		cand := dir + "/" + pol.Path
		if st, err := os.Stat(cand); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH", pol.Path)
}
