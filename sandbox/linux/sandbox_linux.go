// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// Options configure the Linux sandbox.
type Options struct {
	// StubPath is the executable that calls stub.MaybeRun first (default os.Executable()).
	StubPath string
	// CgroupParent is the parent of run cgroups, relative to each hierarchy's root
	// (default: fledge's own cgroup in each hierarchy).
	CgroupParent string
	// Disable* pretend a kernel feature is missing: for tests of strict/degraded handling
	// and for `doctor` what-ifs. They never add confinement.
	DisableLandlock bool
	DisableCgroups  bool
	// DisableUserScope: an ordinary user without a writable cgroup does not ask a systemd
	// user manager for a delegated scope (userscope_linux.go).
	DisableUserScope bool
	// DisableEgressProxy: where no namespace can be made, network by destination is not
	// given through the session's proxy either (the run gets no network at all).
	DisableEgressProxy bool
	DisableNetNS       bool
	DisableView        bool // no private filesystem view (Landlock alone)
	DisablePidNS       bool // no pid namespace of the run's own (the host's /proc, read-only)
	DisableIPCNS       bool // no IPC namespace of the run's own (the host's SysV IPC)
	// DisableSystemIDMap shows system paths as they are (as on a filesystem that cannot be
	// idmapped): a root fledge's commands pass root's owner bits there.
	DisableSystemIDMap bool
	// DisableViewTemplate builds every view afresh instead of copying a session's template
	// (the same view, slower: for benchmarks and tests of both paths).
	DisableViewTemplate bool
	// Launch picks how the child is confined before exec: LaunchThread (default) or
	// LaunchStub (re-exec StubPath through stub.MaybeRun).
	Launch string
	// Prestart: a run follows at once, so a pid-namespace holder is started while New
	// probes (prepare_linux.go), for the first name that asks.
	Prestart bool
	// DisableLauncher launches every run of LaunchThread from a thread of fledge instead
	// of the session's launcher (launcher_linux.go): the same confinement, for benchmarks
	// and tests of both paths.
	DisableLauncher bool
}

// Launch methods.
const (
	// LaunchThread confines a throwaway OS thread of the host and forks from it: no
	// re-exec, the fastest start (see thread_linux.go).
	LaunchThread = "thread"
	// LaunchStub re-executes the stub, which confines itself and execs the program.
	LaunchStub = "stub"
)

// Sandbox implements sandbox.Sandbox with Landlock, cgroups and a re-exec stub.
type Sandbox struct {
	// leaveForTest makes launch threads migrate out of a run's v1 groups even where they
	// could exit in them (threadexit_linux.go): tests of that fallback, and the benchmark
	// comparing both.
	leaveForTest bool
	launch       string
	stubPath     string
	abi          int
	cg           *cgEnv
	netns        bool
	view         bool
	userns       bool
	// userView: the view is built in a user namespace (an unprivileged fledge; every run is
	// an init stub in its own user, mount and pid namespaces). userViewErr says why an
	// unprivileged fledge with user namespaces cannot build one.
	userView    bool
	userViewErr error
	// egressErr: why a run's stub cannot build its network by destination here (stub
	// launcher, unprivileged runs; nil: it can).
	egressErr error
	// proxyOnce, proxyErr: proxyEgress, decided once.
	proxyOnce sync.Once
	proxyErr  error
	noProxy   bool // Options.DisableEgressProxy
	viewOff   bool // Options.DisableView
	kernel    string
	// ipcns: every run gets an IPC namespace of its own (root: unshared by the launch
	// thread or cloned for the stub; as a user: in the init stub's user namespace).
	ipcns bool
	// hideRoot is the idmapping user namespace that shows system paths as an ordinary user
	// sees them (root's view; -1: none, hideRootErr says why).
	hideRoot    int
	hideRootErr error

	// Removing a finished run's (empty) cgroups and temp dir happens after Wait has
	// returned, off the reply's path; Close waits for it and reports what failed.
	cleanups   sync.WaitGroup
	cleanupMu  sync.Mutex
	cleanupErr []error

	spares spares
	// launchers are the sessions' launchers (launcher_linux.go).
	launchers launchers
	// tmps are finished runs' emptied TMPDIRs, handed to later runs (runtmp_linux.go).
	tmps  runTmps
	guard *guard
	// pidns are the pid-namespace holders of the thread launcher's runs (nil: none here).
	pidns *pidNamespaces
	// templates are the thread launcher's view templates (nil: every view built afresh).
	templates *viewTemplates
	// nested keeps the gitlinks of the indexes launches read and their baselines: which
	// nested repositories existed when this Sandbox first saw each index.
	nested *nestedStore
}

// Close waits for finished runs' cleanup (cgroup and temp dir removal) and returns its
// errors. Start must not be called afterwards.
func (s *Sandbox) Close() error {
	// The launchers first: each holds a view copied from a template and sits in a holder's
	// pid namespace.
	s.closeLaunchers()
	// Each of these waits for the kernel (a spare thread's exit and its groups' removal, the
	// release of detached mounts: an RCU grace period each); side by side they share them.
	var closing sync.WaitGroup
	closing.Go(s.closeSpares)
	closing.Go(s.pidns.close)
	closing.Go(s.templates.close)
	s.cleanups.Wait()
	closing.Wait()
	tmpErr := s.tmps.closeAll()
	if s.hideRoot >= 0 {
		unix.Close(s.hideRoot)
		s.hideRoot = -1
	}
	s.cleanupMu.Lock()
	defer s.cleanupMu.Unlock()
	errs := s.cleanupErr
	s.cleanupErr = nil
	if tmpErr != nil {
		errs = append(errs, tmpErr)
	}
	if err := s.guard.close(); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(errs)
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// New probes the kernel once (Landlock ABI, cgroup mode and write access, network
// namespaces) and returns a sandbox that uses what it found.
func New(opts Options) (*Sandbox, error) {
	sb := &Sandbox{stubPath: opts.StubPath, launch: opts.Launch, hideRoot: -1, nested: newNestedStore()}
	sb.launchers.disabled = opts.DisableLauncher
	switch sb.launch {
	case "":
		sb.launch = LaunchThread
	case LaunchThread, LaunchStub:
	default:
		return nil, fmt.Errorf("%w: unknown launch method %q", sandbox.ErrInvalidSpec, opts.Launch)
	}
	if sb.stubPath == "" && sb.launch == LaunchStub {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: locate stub executable: %w", sandbox.ErrUnavailable, err)
		}
		sb.stubPath = p
	}
	// The slow probes (discarded threads in new namespaces, an idmapping user namespace: 3-4
	// ms of every plugin start one after another) run beside the others; each result is
	// taken below where it applies, and an idmapping namespace nobody takes is closed.
	type idmap struct {
		fd  int
		err error
	}
	root := os.Geteuid() == 0 && !opts.DisableView
	early := earlyHolder(opts, root)
	netC, pidC, idmapC := make(chan bool, 1), make(chan bool, 1), make(chan idmap, 1)
	go func() { netC <- !opts.DisableNetNS && canUnshareNet() }()
	go func() { pidC <- root && !opts.DisablePidNS && canClonePidNS() }()
	go func() {
		r := idmap{fd: -1}
		if root && !opts.DisableSystemIDMap {
			r.fd, r.err = hideRootNS()
		}
		idmapC <- r
	}()
	if !opts.DisableLandlock {
		sb.abi = kernel.LandlockABI()
	}
	if opts.DisableCgroups {
		sb.cg = &cgEnv{mode: CgroupNone, v1: map[string]string{}, v2Ctl: map[string]bool{}}
	} else {
		sb.cg = probeCgroups(opts.CgroupParent)
		if !sb.cg.writable() && opts.CgroupParent == "" && os.Geteuid() != 0 && !opts.DisableUserScope {
			sb.cg = userScopeCgroups(sb.cg)
		}
	}
	sb.noProxy = opts.DisableEgressProxy
	sb.netns = <-netC
	sb.userns = userNamespaces()
	sb.viewOff = opts.DisableView
	if !opts.DisableView {
		sb.view = canBuildView()
		if !sb.view && sb.userns {
			sb.userView, sb.userViewErr = sb.tryUserView(opts)
			sb.view = sb.userView
		}
	}
	sb.guard = newGuard(sb.stubPath)
	// A user's init stub is cloned with CLONE_NEWIPC in its user namespace (userSys).
	sb.ipcns = !opts.DisableIPCNS && (sb.userView || canUnshareIPC())
	idm := <-idmapC
	if sb.view && !sb.userView {
		switch {
		case opts.DisableSystemIDMap:
			sb.hideRootErr = fmt.Errorf("%w: disabled", errNoIDMap)
		case root:
			sb.hideRoot, sb.hideRootErr, idm.fd = idm.fd, idm.err, -1
		default:
			sb.hideRoot, sb.hideRootErr = hideRootNS()
		}
	}
	if idm.fd >= 0 {
		unix.Close(idm.fd)
	}
	if sb.view && !sb.userView && !opts.DisablePidNS && (<-pidC || !root && canClonePidNS()) {
		sb.pidns = newPidNamespaces(sb.guard.exe)
	}
	sb.pidns.adopt(early)
	if sb.view && sb.launch == LaunchThread && !opts.DisableViewTemplate {
		sb.templates = newViewTemplates()
	}
	if sb.launch == LaunchStub || sb.userView {
		sb.egressErr = sb.egressSupport()
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		sb.kernel = unix.ByteSliceToString(uts.Release[:])
	}
	return sb, nil
}

// tryUserView probes for a view in user namespaces; on success every run goes through the
// init stub (with a network namespace of its own when the spec denies the network, which
// an unprivileged process can have only there).
func (s *Sandbox) tryUserView(opts Options) (bool, error) {
	stubPath := s.stubPath
	if stubPath == "" {
		if !stub.MaybeRunCalled() {
			return false, errNoStub
		}
		p, err := os.Executable()
		if err != nil {
			return false, fmt.Errorf("%w: %w", errNoStub, err)
		}
		stubPath = p
	}
	netns := !opts.DisableNetNS
	err := probeUserView(stubPath, netns)
	if err != nil && netns {
		// Some kernels allow the user namespace but not a network namespace in it.
		if probeUserView(stubPath, false) == nil {
			netns, err = false, nil
		}
	}
	if err != nil {
		return false, err
	}
	s.stubPath, s.launch = stubPath, LaunchStub
	if netns {
		s.netns = true
	}
	return true, nil
}

// LandlockABI is the ABI this sandbox applies (0 = none).
func (s *Sandbox) LandlockABI() int { return s.abi }

// canUnshareNet tries unshare(CLONE_NEWNET) on a throwaway thread, and keeps the namespace
// it made as one made ahead (netNamespaces.probe).
func canUnshareNet() bool { return aheadNetNS.probe() }

// canBuildView tries a mount namespace on a throwaway thread (like canUnshareNet): a view
// needs CAP_SYS_ADMIN there.
func canBuildView() bool {
	if !kernel.ViewSupported() {
		return false
	}
	ok := false
	onDiscardedThread(func() { ok = unix.Unshare(unix.CLONE_FS|unix.CLONE_NEWNS) == nil })
	return ok
}

// canClonePidNS: a new pid namespace can be made (CAP_SYS_ADMIN) and a detached mount
// can be copied (open_tree of an fsmount tree: Linux 6.15). Probed with a tmpfs on a
// throwaway thread, so nothing is mounted anywhere.
func canClonePidNS() bool {
	ok := false
	onDiscardedThread(func() { ok = probePidNS() == nil })
	return ok
}

// probePidNS runs canClonePidNS's steps on the calling (discarded) thread.
func probePidNS() error {
	if err := unix.Unshare(unix.CLONE_NEWPID); err != nil {
		return err
	}
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return err
	}
	mfd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	c, err := cloneProc(mfd)
	if err != nil {
		return err
	}
	return unix.Close(c)
}

func userNamespaces() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		return false
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return os.Geteuid() == 0
	}
	return true
}

// networkDeny says how Network=false is enforced.
func (s *Sandbox) networkDeny() string {
	var parts []string
	if s.netns {
		parts = append(parts, "netns")
	}
	if s.abi >= 4 {
		parts = append(parts, "landlock-tcp")
		if s.abi >= 10 {
			parts[len(parts)-1] = "landlock-tcp-udp"
		}
	}
	if !s.netns && s.abi >= 4 && kernel.SeccompSupported() {
		// No namespace: every IPv4/IPv6 socket but TCP is refused too (stub.Policy.TCPOnly).
		parts = append(parts, "seccomp-tcp-only")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// Report describes what this sandbox enforces here.
func (s *Sandbox) Report() sandbox.Report {
	r := sandbox.Report{
		OS:             "linux",
		Kernel:         s.kernel,
		Confinement:    "none",
		LandlockABI:    s.abi,
		CgroupMode:     s.cg.mode,
		CgroupWritable: s.cg.writable(),
		CgroupPath:     s.cg.unified,
		UserNamespaces: s.userns,
		NetworkDeny:    s.networkDeny(),
		NetworkEgress:  s.egressReport(),
		UnixSocketDeny: map[bool]string{true: "seccomp", false: "none"}[kernel.UnixSocketFilterSupported()],
		TreeKill:       s.treeKill(),
		HostDeath:      "none",
		FilesystemView: "none",
		PidNamespace:   "none",
		IPCNamespace:   IPCNone,
		SystemFiles:    SystemFilesByName,
		Warnings:       append([]string{}, s.cg.warnings...),
		KernelRefusals: kernelRefusals(s.launch),
		LandlockAudit:  landlockAudit(s.abi),
	}
	switch {
	case s.userView:
		r.FilesystemView = ViewUserNS
	case s.view:
		r.FilesystemView = "mount-namespace"
	default:
		r.Warnings = append(r.Warnings, "no private filesystem view ("+s.noViewReason()+"): Landlock alone, so paths outside the sandbox exist and their metadata (chmod, utime) can change, and /proc shows the host's processes")
	}
	if s.userView {
		r.PidNamespace = "per-run"
	} else if s.pidns.available() {
		r.PidNamespace = "per-plugin"
	} else if s.view {
		r.Warnings = append(r.Warnings, "no pid namespace of the run's own: commands see the host's processes in a read-only /proc (needs Linux 6.15)")
	}
	if s.ipcns {
		r.IPCNamespace = IPCPerRun
	} else {
		r.Warnings = append(r.Warnings, "no IPC namespace of the run's own: commands share SysV shared memory, message queues and semaphores with the host user")
	}
	switch {
	case s.userView || s.hideRoot >= 0:
		// Idmapped system paths (root), or a user's view (root's files are others' anyway).
		r.SystemFiles = SystemFilesOthers
	case s.hideRootErr != nil:
		r.Warnings = append(r.Warnings, s.hideRootErr.Error()+" (only /etc's known secrets are left out, by name)")
	case os.Geteuid() == 0:
		r.Warnings = append(r.Warnings, errNoIDMap.Error()+" (no private filesystem view; only /etc's known secrets are left out, by name)")
	default:
		r.SystemFiles = SystemFilesOthers // not root: root's files are others' anyway
	}
	if s.guard.available() {
		r.HostDeath = "watchdog"
	} else {
		r.Warnings = append(r.Warnings, errNoWatchdog.Error()+": commands outlive a killed host")
	}
	if r.CgroupPath == "" {
		r.CgroupPath = s.cg.v1["memory"]
	}
	// The default spec refuses unix sockets, so the table shows that rule too.
	for _, d := range kernel.DeniedSyscalls(kernel.Filter{DenyUnix: true}) {
		r.SeccompDenied = append(r.SeccompDenied, sandbox.DeniedSyscall(d))
	}
	if !kernel.SeccompSupported() {
		r.Warnings = append(r.Warnings, "no seccomp filter for this architecture: io_uring, namespaces, keyrings, ptrace attach, set-id bits and unix sockets are not refused")
	}
	if s.abi > 0 {
		r.Confinement = "landlock"
	} else {
		r.Warnings = append(r.Warnings, "Landlock unavailable: no filesystem confinement")
	}
	if s.abi > 0 && s.abi < 6 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("Landlock ABI %d: signals and abstract sockets not scoped (needs 6)", s.abi))
	}
	if !r.CgroupWritable {
		if s.userView {
			r.Warnings = append(r.Warnings, "no writable cgroup: no memory/pids/cpu limits (the run's pid namespace still ends every process it started)")
		} else {
			r.Warnings = append(r.Warnings, "no writable cgroup: no memory/pids/cpu limits; setsid or daemonized children can escape the process-group kill")
		}
	}
	if r.NetworkDeny == "none" {
		r.Warnings = append(r.Warnings, "network deny cannot be enforced")
	}
	return r
}

// ViewUserNS is Report.FilesystemView of a view built in a user namespace: the same view
// as "mount-namespace", plus /proc of the run's own pid namespace.
const ViewUserNS = "mount-namespace+userns"

// noViewReason says why this sandbox builds no view.
func (s *Sandbox) noViewReason() string {
	switch {
	case s.viewOff:
		return "disabled"
	case s.userViewErr != nil:
		return "not root, and user namespaces cannot build one here: " + s.userViewErr.Error()
	}
	return "neither root nor user namespaces"
}

// plan works out the Mode of one run and refuses it under Strict when a promise fails.
func (s *Sandbox) plan(spec *sandbox.Spec) (sandbox.Mode, error) {
	m := sandbox.Mode{Confinement: "none", Cgroup: CgroupNone, TreeKill: s.noCgroupKill()}
	if s.abi > 0 {
		m.Confinement, m.LandlockABI = "landlock", s.abi
	} else {
		m.Degraded = append(m.Degraded, "filesystem confinement (Landlock unavailable)")
	}
	if s.abi > 0 && s.abi < 6 {
		m.Degraded = append(m.Degraded, "signal and abstract-socket scoping (Landlock ABI < 6)")
	}
	if s.cg.writable() {
		m.Cgroup, m.TreeKill = s.cg.mode, s.cg.killMethod()
	} else {
		if s.userView {
			m.Degraded = append(m.Degraded, "cgroup (no memory, pids or cpu limits)")
		} else {
			m.Degraded = append(m.Degraded, "cgroup (no limits; process-group kill only)")
		}
	}
	if !spec.Network {
		m.NetNS = s.netns
		if !s.netns && s.abi < 4 {
			m.Degraded = append(m.Degraded, "network deny")
		}
	}
	if !kernel.SeccompSupported() {
		m.Degraded = append(m.Degraded, "seccomp filter: syscall deny-list, unix-socket and setuid-bit deny (no filter for this architecture)")
	}
	if !s.guard.available() {
		m.Degraded = append(m.Degraded, "host-death cleanup ("+errNoWatchdog.Error()+")")
	}
	if !s.view {
		// Strict refuses whenever no view will be built, whatever the reason.
		m.Degraded = append(m.Degraded, "private filesystem view ("+s.noViewReason()+")",
			"pid namespace (/proc shows the host's processes)")
	}
	if s.view && !s.userView && !s.pidns.available() {
		m.Degraded = append(m.Degraded, "pid namespace (the host's processes are visible in /proc)")
	}
	if s.view && s.hideRootErr != nil {
		m.Degraded = append(m.Degraded, "system paths ("+s.hideRootErr.Error()+")")
	}
	if !s.ipcns {
		m.Degraded = append(m.Degraded, "IPC namespace (SysV IPC and POSIX message queues shared with the host)")
	}
	if spec.Strict && len(m.Degraded) > 0 {
		return m, fmt.Errorf("%w: %s", sandbox.ErrUnavailable, strings.Join(m.Degraded, "; "))
	}
	return m, nil
}

// Start runs spec under confinement.
func (s *Sandbox) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Path == "" || len(spec.Args) == 0 {
		return nil, fmt.Errorf("%w: empty program", sandbox.ErrInvalidSpec)
	}
	if err := checkAccess(&spec.Access, append(implicitReadOnly, implicitReadWrite...)...); err != nil {
		return nil, err
	}
	if err := checkTrustBundle(spec); err != nil {
		return nil, err
	}
	if err := s.checkImageRoot(spec); err != nil {
		return nil, err
	}
	mode, err := s.plan(spec)
	if err != nil {
		return nil, err
	}
	// The plugin session's network by destination: its namespace, made by the first run
	// of the session and joined by every later one. Without it the run gets no network
	// at all (an empty namespace), never more.
	var rg *runEgress
	if spec.Egress != nil && !spec.Network {
		if rg, err = s.egressFor(spec); err != nil {
			if spec.Strict {
				return nil, fmt.Errorf("%w: network by destination: %w", sandbox.ErrUnavailable, err)
			}
			mode.Degraded = append(mode.Degraded, "network by destination ("+err.Error()+"): the run gets no network at all")
		} else if rg.proxy == nil {
			mode.NetNS = true
		}
	}
	p := &process{
		sb:    s,
		spec:  spec,
		mode:  mode,
		start: time.Now(),
	}
	// Counted from here: Close waits for the run's cleanup (synchronous on failure, after
	// Wait otherwise).
	s.cleanups.Add(1)
	ok := false
	defer func() {
		if !ok {
			p.cleanup()
			s.cleanups.Done()
		}
	}()

	env := append([]string{}, spec.Env...)
	rw := append([]string{}, spec.Access.ReadWrite...)
	if spec.PrivateTmp {
		parent, perr := safefs.TempParent(rw) // never beneath a directory the run can replace
		if perr != nil {
			return nil, fmt.Errorf("%w: private tmp: %w", sandbox.ErrLaunch, perr)
		}
		if p.tmpd, err = s.tmps.get(parent, spec.Name); err != nil {
			return nil, fmt.Errorf("%w: private tmp: %w", sandbox.ErrLaunch, err)
		}
		p.tmp, p.tmpParent = p.tmpd.path, parent
		rw = append(rw, p.tmp)
		env = sandbox.WithEnv(env, "TMPDIR", p.tmp)
	}

	pol := &stub.Policy{Path: spec.Path, Args: spec.Args, Env: env, NoFile: spec.Limits.NoFile,
		DenyUnix: !spec.UnixSockets && kernel.UnixSocketFilterSupported()}
	if s.abi > 0 {
		readExec := spec.Access.ReadExec
		if spec.Root != "" {
			// The image's own files, by their paths in the view (the rules are opened there).
			top, err := imageRules(spec.Root, imageAvoid(spec, rw))
			if err != nil {
				return nil, err
			}
			readExec = append(append([]string{}, readExec...), top...)
		}
		pol.Landlock = &kernel.Landlock{
			ABI:       s.abi,
			ReadWrite: append(rw, implicitReadWrite...),
			ReadOnly:  expandEtc(append(append([]string{}, spec.Access.ReadOnly...), implicitReadOnlyFor(spec)...)),
			ReadExec:  readExec,
			// checkAccess refused lists that cover these above; the ruleset checks again
			// what it opens, which a symlink flipped meanwhile cannot change.
			Deny:    spec.Access.Deny,
			DenyNet: !spec.Network && (rg == nil || rg.proxy != nil),
			BindTCP: spec.ListenTCP,
			Scope:   true,
			LogExec: true,
		}
		// Any TCP port only where the run gets its own network namespace (below).
		pol.Landlock.BindAnyTCP = spec.ListenAnyTCP && !spec.Network && inNetNS(spec, s.netns, rg)
		if rg != nil && rg.proxy != nil {
			pol.Landlock.ConnectTCP = []uint16{rg.proxy.Port()}
		}
	}
	// Without a network namespace of its own a run's network bound is Landlock's TCP
	// rules: every other IPv4/IPv6 socket is refused (UDP, so DNS too).
	pol.TCPOnly = !spec.Network && !inNetNS(spec, s.netns, rg) && s.abi >= 4 && kernel.SeccompSupported()
	if rg != nil && rg.proxy != nil {
		// Landlock's rule is a port, at any address: the host makes the run's connects
		// itself, to 127.0.0.1 on that port only (kernel.ServeNotifyConnect). Without the
		// listener every connect fails (ENOSYS): closed, never open.
		pol.ConnectCheck = kernel.SeccompSupported()
		for _, kv := range rg.proxy.Env() {
			k, v, _ := strings.Cut(kv, "=")
			pol.Env = sandbox.WithEnv(pol.Env, k, v)
		}
	}
	if s.view {
		if pol.View, p.checkouts, err = buildView(spec, rw, s.nested); err != nil {
			return nil, err
		}
		pol.View.RunTmp = p.tmp
		if !s.userView {
			markSystem(pol.View, s.hideRoot)
			// Commands keep uid 0: /proc's root-only files are covered (a user's are
			// refused them by their owner bits). Without the list, a root fledge's view
			// would show them: the run is refused rather than degraded in silence.
			if pol.View.ProcMask, err = kernel.RootOnlyProc(); err != nil {
				return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
			}
			if !ownNetNS(spec, s.netns, rg) {
				// The run shares fledge's network namespace, whose sysctls /proc/sys/net
				// shows it: the namespace's root-only secrets are covered too.
				netMask, err := kernel.NetRootOnlyProc()
				if err != nil {
					return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
				}
				pol.View.ProcMask = append(slices.Clip(pol.View.ProcMask), netMask...)
			}
		}
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	if s.ipcns && !s.userView {
		// The thread launcher unshares it on the launch thread (thread_linux.go), the stub
		// is cloned with it; userSys adds it for a user's init stub.
		sys.Cloneflags |= unix.CLONE_NEWIPC
	}
	if !s.userView {
		noSupplementaryGroups(sys)
	}
	if s.userView {
		ownProc(pol.View)
		pol.Init = true
		userSys(sys)
		if !s.ipcns {
			sys.Cloneflags &^= unix.CLONE_NEWIPC
		}
	}
	var sp *spare
	defer func() {
		if sp != nil && !ok {
			s.disposeSpare(sp, false) // its groups are p.cg now: p.cleanup removes them
		}
	}()
	if s.cg.writable() {
		var rc *runCgroup
		var degraded []string
		var err error
		if sp = s.takeSpare(spec, s.launchers.has(spec.Name)); sp != nil {
			rc, degraded = sp.rc, sp.degraded
		} else {
			rc, degraded, err = newRunCgroup(s.cg, spec.Name, &spec.Limits)
		}
		if err != nil {
			if spec.Strict {
				return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
			}
			p.mode.Degraded = append(p.mode.Degraded, "cgroup ("+err.Error()+")")
			p.mode.Cgroup, p.mode.TreeKill = CgroupNone, s.noCgroupKill()
		} else {
			p.cg = rc
			// Registered before the tree exists: a host killed from here on leaves nothing.
			if err := s.guard.add(rc.guardItems()...); err != nil {
				if spec.Strict {
					return nil, fmt.Errorf("%w: host-death watchdog: %w", sandbox.ErrUnavailable, err)
				}
				p.mode.Degraded = append(p.mode.Degraded, "host-death cleanup ("+err.Error()+")")
			} else {
				p.guarded = rc.guardItems()
			}
			if len(degraded) > 0 {
				if spec.Strict {
					return nil, fmt.Errorf("%w: %s", sandbox.ErrUnavailable, strings.Join(degraded, "; "))
				}
				p.mode.Degraded = append(p.mode.Degraded, degraded...)
			}
			pol.CgroupProcs = rc.joinFiles()
			if rc.fd != nil {
				// CLONE_INTO_CGROUP: the child is born inside its group, no window.
				sys.UseCgroupFD, sys.CgroupFD = true, int(rc.fd.Fd())
			}
		}
	}
	if ownNetNS(spec, s.netns, rg) {
		// No network, or the run's own namespace for its network by destination (built
		// by its stub, Policy.Net).
		sys.Cloneflags |= unix.CLONE_NEWNET
	}
	if rg != nil && rg.eng != nil && rg.proxy == nil {
		pol.Net = rg.eng.Plan()
		if s.userView {
			egressCaps(sys)
		}
	}

	if p.stdio, err = stub.OpenStdio(spec.Stdin, spec.Stdout, spec.Stderr); err != nil {
		return nil, fmt.Errorf("%w: stdio: %w", sandbox.ErrLaunch, err)
	}
	if s.launch == LaunchStub {
		if err := sandbox.RunBeforeExec(spec); err != nil {
			p.stdio.Started()
			p.stdio.Abort()
			return nil, err
		}
		l := &stub.Launch{
			StubPath: s.stubPath,
			Policy:   pol,
			Dir:      spec.Dir,
			Stdin:    p.stdio.Files[0], Stdout: p.stdio.Files[1], Stderr: p.stdio.Files[2],
			Sys: sys,
		}
		if rg != nil && rg.eng != nil && rg.proxy == nil {
			l.NetAttach = func(fds *kernel.EgressFDs) error {
				detach, err := rg.eng.Attach(fds)
				p.netDetach = detach
				return err
			}
		}
		if rn := newRunNotify(spec, pol); rn != nil {
			if err := rn.prepareStub(pol, l, spec.Trace); err != nil {
				p.mode.Degraded = append(p.mode.Degraded, "kernel refusal records ("+err.Error()+")")
			} else {
				p.notify = rn
				rn.watchLandlock(pol)
			}
		}
		if pol.View != nil && !s.userView && s.pidns.available() {
			// Root: the stub is born in the plugin's pid namespace (started from a thread
			// that joined it) and mounts that namespace's procfs in its view.
			p.proc, p.holder, err = s.startStubInPidNS(spec, l)
		} else {
			p.proc, err = l.Start()
		}
		p.status = l.Status
		if p.notify != nil {
			if err != nil {
				p.notify.abort()
				p.notify = nil
			} else {
				p.notify.launched()
			}
		}
	} else {
		// The launch thread calls BeforeExec right before fork, so the audit fsync overlaps
		// the thread's setup (its v1 cgroup joins are the slow part).
		tl := &threadLaunch{pol: pol, dir: spec.Dir, files: p.stdio.Files[:], sys: sys, before: spec, pidNS: -1, netNS: -1,
			leave: s.leaveForTest}
		if rg != nil && rg.ns != nil {
			tl.netNS = int(rg.ns.Fd())
		}
		if sys.Cloneflags&unix.CLONE_NEWNET != 0 {
			// A fresh namespace made ahead, entered with setns (netns_linux.go).
			if fd := aheadNetNS.take(); fd >= 0 {
				tl.netNS = fd
				sys.Cloneflags &^= unix.CLONE_NEWNET
				defer unix.Close(fd)
			}
		}
		var releases []func()
		// join points the launch at the plugin's pid namespace and its view template.
		join := func() error {
			if pol.View != nil && s.pidns.available() {
				release, err := s.joinPidNS(spec, tl)
				if err != nil {
					return err
				}
				releases = append(releases, release)
			}
			if pol.View != nil && s.templates != nil {
				// After the pid namespace: the template holds that namespace's /proc.
				if p.tmpl = s.templates.acquire(pol.View); p.tmpl != nil {
					tl.tmpl = p.tmpl.t
				}
			}
			return nil
		}
		defer func() {
			for _, r := range releases {
				r()
			}
		}()
		err = join()
		p.holder = tl.holder
		if err != nil {
			p.stdio.Started()
			p.stdio.Abort()
			return nil, err
		}
		if p.cg != nil {
			tl.v1Tasks, tl.v1Back = p.cg.v1Dirs()
		}
		// The session's launcher where it can run (launcher_linux.go): a command (not a
		// plugin process: its start through the launcher measured slower, see
		// docs/performance.md) with a view copied from the session's template, in the
		// session's pid namespace, without network by destination. The rest, and a
		// session's first runs (its launcher is started after them), launch from a thread
		// of fledge.
		hostNet := spec.Network
		canLauncher := !s.launchers.disabled && spec.Kind == sandbox.KindExec && pol.View != nil && p.tmpl != nil && tl.holder != nil && rg == nil && kernel.SeccompSupported()
		var l *launcher
		if canLauncher && (sp == nil || sp.bare) {
			// (A spare with a thread parked in its groups is launched from that thread.)
			if l, err = s.launchers.forRun(spec.Name, p.tmpl.t, tl.holder, hostNet); err != nil {
				p.stdio.Started()
				p.stdio.Abort()
				return nil, err
			}
			if l == nil && launcherFirstForTest {
				l = s.startLauncherNow(spec.Name, p.tmpl, tl.holder, hostNet)
			}
		}
		if l != nil {
			p.proc, err = s.launchVia(l, spec, p, pol, sys, tl, sp)
			if sp != nil && sp.bare {
				sp = nil // its groups are p.cg's now
			}
			switch {
			case errors.Is(err, kernel.ErrTemplateUnfit):
				// The launcher started nothing (or nothing was sent): from a thread,
				// which builds the view afresh. A launcher thread parked in the run's
				// groups ends there; it is gone before the next one joins them.
				l = nil
				if p.recorded {
					tl.before = nil // the decision record is written
				}
				p.awaitLeft()
				p.closeLaunchExit()
				p.left, p.launchExit = nil, nil
			case errors.Is(err, errLauncherGone) && !tl.holder.alive():
				// The plugin's pid namespace ended (its holder died) and took the launcher
				// with it: as the thread launcher does then, once more with a new holder.
				l = nil
				if p.recorded {
					tl.before = nil // the decision record is written
				}
			default:
				p.viaLauncher = true
			}
		}
		if l == nil {
			err = s.launchFromThread(spec, p, tl, sp, join)
			sp = nil // the launch consumes the parked thread, whatever its outcome
			if err == nil && canLauncher {
				// The session's next runs go through its launcher, started now.
				s.startLauncherAhead(spec.Name, p.tmpl, p.holder, hostNet)
			}
		}
	}
	p.stdio.Started()
	if err != nil {
		return nil, err
	}
	p.ProcessBase = sandbox.NewProcessBase(p.proc)
	if p.cg == nil && s.guard.available() {
		// No cgroup: the process group (the child is a session leader) is what the
		// watchdog can reach; registered right after the start.
		item := "+pg " + strconv.Itoa(p.proc.Pid)
		if err := s.guard.add(item); err != nil {
			p.mode.Degraded = append(p.mode.Degraded, "host-death cleanup ("+err.Error()+")")
		} else {
			p.guarded = []string{item}
		}
	}
	ok = true
	s.spareAfterLaunch(spec, p)
	go p.wait()
	go p.watch(ctx)
	return p, nil
}

// startStubInPidNS starts l's stub in the pid namespace of spec's name: from a throwaway
// thread that joined it (setns CLONE_NEWPID only changes where that thread's children are
// born), with a fresh procfs of its namespace in the view instead of the host's.
func (s *Sandbox) startStubInPidNS(spec *sandbox.Spec, l *stub.Launch) (*os.Process, *pidHolder, error) {
	h, err := s.pidns.get(spec.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	ownProc(l.Policy.View)
	var proc *os.Process
	onDiscardedThread(func() {
		// The thread's children are born in the namespace from now on.
		if err = unix.Setns(h.nsFD, unix.CLONE_NEWPID); err != nil {
			err = fmt.Errorf("%w: pid namespace: %w", sandbox.ErrLaunch, err)
			return
		}
		proc, err = l.Start()
	})
	return proc, h, err
}

// joinPidNS points tl at the pid namespace of spec's name: the launch thread joins it and
// the view mounts its procfs. The holder's fds are duplicated for the launch (a holder
// replaced meanwhile closes its own); release closes the copies.
func (s *Sandbox) joinPidNS(spec *sandbox.Spec, tl *threadLaunch) (release func(), err error) {
	h, err := s.pidns.get(spec.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	var fds []int
	release = func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	for _, fd := range []int{h.nsFD, h.procFD} {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			release()
			return nil, fmt.Errorf("%w: pid namespace: %w", sandbox.ErrLaunch, err)
		}
		fds = append(fds, d)
	}
	tl.pidNS, tl.holder = fds[0], h
	tl.pol.View.ProcTree = fds[1]
	if tl.pol.Landlock != nil {
		tl.pol.Landlock.ProcFD, tl.pol.Landlock.ProcKey = fds[1], h.procKey
	}
	return release, nil
}

// process is one running tree.
type process struct {
	// ProcessBase: Pid, Signal, Wait, and the two moments of the end (main process reaped;
	// tree gone and Result set), as every backend has them.
	sandbox.ProcessBase
	sb    *Sandbox
	spec  *sandbox.Spec
	mode  sandbox.Mode
	start time.Time
	proc  *os.Process
	cg    *runCgroup
	stdio *stub.Stdio
	tmp   string
	// tmpd and tmpParent are tmp's identity and parent: a TMPDIR is handed to a later run
	// only when treeGone (runtmp_linux.go).
	tmpd      tmpDir
	tmpParent string
	// treeGone: the run's cgroup was killed and seen empty, so no process of it is left.
	treeGone bool
	// left is closed once the thread launcher's thread is out of the run's v1 groups (nil:
	// nothing to wait for); see threadLaunch.left. Where launchExit is set, that thread
	// exits in the groups instead: left is closed right before it exits, and launchExit
	// (its pidfd) tells its death; it is closed at cleanup.
	left       chan struct{}
	launchExit *os.File
	// letGo is the pidfd of a session launcher's thread that was parked in the run's v1
	// groups and let go unused (launchFromThread): it dies in them while the run starts,
	// and whatever touches the groups waits for its death first (nil: none).
	letGo *os.File
	tmpl  *viewTemplate // the view template the run was launched from (nil: none)
	// holder is the pid namespace the run was launched into (nil: none), held until cleanup.
	holder *pidHolder
	// status is an init stub's status pipe (userView): proc is the stub, the program's
	// wait status comes through here.
	status *os.File
	// guarded are the watchdog registrations of this tree, removed once it is gone.
	guarded []string
	// checkouts are the checkouts whose index the launch read: their gitlinks are looked
	// at again once the tree is gone (gitnested_linux.go).
	checkouts []*indexedCheckout
	// viaLauncher: the run was launched by the session's launcher (launcher_linux.go);
	// recorded: its BeforeExec ran there.
	viaLauncher, recorded bool
	// netDetach ends the run's own egress namespace (stub-built) once the tree is gone.
	netDetach func()
	// notify records the run's kernel refusals (nil: not asked for, or unavailable).
	notify *runNotify

	mu        sync.Mutex
	killed    map[int]bool
	timedOut  bool
	cancelled bool
	// killing is held by a tree kill or signal from its listing of the members to its note
	// of them: the kill ends the main process at once, and wait must not read the count of
	// processes killed (the Result's, the audit record's) between the two.
	killing sync.Mutex
}

func (p *process) Kill() error {
	select {
	case <-p.Done():
		return nil
	default:
	}
	return p.killTree()
}

func (p *process) note(pids []int, main bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed == nil {
		p.killed = map[int]bool{}
	}
	for _, pid := range pids {
		if pid == p.proc.Pid && !main {
			continue // the main process exited on its own
		}
		p.killed[pid] = true
	}
}

// Interrupt sends SIGINT to the run's process group, as the terminal's Ctrl+C would: the
// program and every child that stayed in its group. A child that left the group is not
// reached, as on a terminal; the ladder's SIGKILL still is.
func (p *process) Interrupt() error {
	select {
	case <-p.Exited():
		return os.ErrProcessDone
	default:
	}
	if p.status == nil {
		return syscall.Kill(-p.proc.Pid, syscall.SIGINT)
	}
	// The group leader is an init stub, which passes SIGINT on to the program: a group
	// signal would reach the program twice (a Python plugin's KeyboardInterrupt handler
	// interrupted by the second). Every member but the stub, then; one forked meanwhile is
	// left to the ladder.
	for _, pid := range pgroupMembers(p.proc.Pid) {
		if pid != p.proc.Pid {
			_ = syscall.Kill(pid, syscall.SIGINT)
		}
	}
	return nil
}

// leaveWait bounds how long touching a run's groups waits for its launch thread to leave
// them (two writes to tasks files; only a kernel stuck in cgroup migration takes longer).
const leaveWait = 5 * time.Second

// awaitLeft waits until the launch thread left the run's v1 groups: a freezer kill must not
// freeze a thread of fledge, and a group with a task in it cannot be removed.
func (p *process) awaitLeft() {
	if p.letGo != nil {
		threadGone(p.letGo, leaveWait)
	}
	if p.left == nil {
		return
	}
	select {
	case <-p.left:
	default:
		t := time.NewTimer(leaveWait)
		select {
		case <-p.left:
			t.Stop()
		case <-t.C:
			return
		}
	}
	if p.launchExit != nil {
		// The thread exits in the groups: left says it is about to.
		threadGone(p.launchExit, leaveWait)
	}
}

// closeLaunchExit closes the launch thread's pidfd (once it is no longer waited for).
func (p *process) closeLaunchExit() {
	if p.launchExit != nil {
		_ = p.launchExit.Close()
	}
	if p.letGo != nil {
		_ = p.letGo.Close()
		p.letGo = nil
	}
}

// signalTree sends sig to every process of the tree. It holds killing as a kill does: the
// timeout's SIGTERM can end the main process (and the whole tree) at once, and the count of
// processes killed must not be read before the ones signalled are noted (it read 0 for a
// fork bomb that died of the SIGTERM, under load).
func (p *process) signalTree(sig syscall.Signal) {
	p.killing.Lock()
	defer p.killing.Unlock()
	p.awaitLeft()
	if p.cg != nil {
		p.note(p.cg.signal(sig), true)
		return
	}
	if syscall.Kill(-p.proc.Pid, sig) == nil {
		p.note([]int{p.proc.Pid}, true)
	}
}

// killTree SIGKILLs every process of the tree.
func (p *process) killTree() error {
	p.killing.Lock()
	defer p.killing.Unlock()
	mainAlive := true
	select {
	case <-p.Exited():
		mainAlive = false
	default:
	}
	p.awaitLeft()
	if p.cg != nil {
		pids, err := p.cg.kill()
		p.note(pids, mainAlive)
		return err
	}
	// No cgroup: the process group is all we can reach (setsid escapes, see Mode).
	if syscall.Kill(-p.proc.Pid, 0) != nil {
		return nil // the group is empty: skip the /proc scan
	}
	members := pgroupMembers(p.proc.Pid)
	if err := syscall.Kill(-p.proc.Pid, syscall.SIGKILL); err == nil {
		p.note(members, mainAlive)
	}
	return nil
}

// ownNetNS says whether the run gets a network namespace of its own: no network, or its
// network by destination (built by its stub). Otherwise it shares fledge's.
// inNetNS: the run is in a network namespace that is not the host's, its own or its
// plugin session's (joined).
func inNetNS(spec *sandbox.Spec, netns bool, rg *runEgress) bool {
	return ownNetNS(spec, netns, rg) || (!spec.Network && rg != nil && rg.ns != nil)
}

func ownNetNS(spec *sandbox.Spec, netns bool, rg *runEgress) bool {
	return !spec.Network && netns && (rg == nil || (rg.eng != nil && rg.proxy == nil))
}

// watch enforces the timeout and context cancellation: SIGTERM to all, KillGrace, SIGKILL.
func (p *process) watch(ctx context.Context) {
	sandbox.Watchdog(ctx, p.spec.Limits, p.Exited(), func(r sandbox.StopReason) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.timedOut = r == sandbox.StopTimeout
		p.cancelled = r == sandbox.StopCancel
	}, func() { p.signalTree(syscall.SIGTERM) }, func() { _ = p.killTree() })
}

// copyGrace bounds how long Wait waits for output copies after the tree is gone.
const copyGrace = 2 * time.Second

// wait reaps the main process, kills every survivor, collects the result and cleans up.
func (p *process) wait() {
	st, werr := p.proc.Wait()
	p.MarkExited()
	res := &sandbox.Result{Mode: p.mode}
	var errs []error
	ws, ok := syscall.WaitStatus(0), false
	if werr == nil {
		ws, ok = st.Sys().(syscall.WaitStatus)
	}
	if p.status != nil {
		// The init stub's own status says only that it ended; the program's is in the pipe
		// (absent when the stub was killed first: then the tree died of that signal).
		if cmd, got := stub.ReadStatus(p.status, statusBound); got {
			ws, ok, werr = cmd, true, nil
		}
		p.status.Close()
	}
	if werr != nil {
		errs = append(errs, werr)
	} else if ok {
		switch {
		case ws.Signaled():
			res.ExitCode = 128 + int(ws.Signal())
			res.Signal = unix.SignalName(ws.Signal())
		default:
			res.ExitCode = ws.ExitStatus()
		}
	}
	// Nothing of the command outlives its main process. Where the unified group says the
	// tree is gone already (every process of it exited: the usual end of a command),
	// there is nothing to kill or wait for, and one read of cgroup.events tells it. The
	// tree cannot come back: an empty group gains a process only by a fork of a member or
	// a move by fledge.
	gone := p.cg != nil && p.cg.unified != "" && p.cg.empty()
	if !gone {
		if err := p.killTree(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.cg != nil {
		if gone {
			// Nothing to wait for.
		} else if err := p.cg.waitEmpty(); err != nil {
			errs = append(errs, err)
		}
		res.OOMKilled, res.PeakMemory = p.cg.stats()
		p.treeGone = len(errs) == 0
	}
	if p.notify != nil {
		// The tree is gone: its last refused calls are answered and the true counts
		// reported before the Result is, so the adapter's records of them come first.
		p.notify.finish()
	}
	if !p.stdio.Finish(copyGrace) {
		res.Mode.Degraded = append(res.Mode.Degraded, "output copy did not finish")
	}
	if len(p.checkouts) > 0 {
		// The tree is gone: nothing of this run can make a .git any more. Before the
		// Result is published, so the adapter records and tells what was moved.
		res.Quarantined = p.sb.nested.quarantineNested(p.checkouts, p.spec.Access.ReadWrite, p.spec.Access.Unprotect)
	}
	res.Duration = time.Since(p.start)
	// A kill that ended the main process has noted what it killed before this is read.
	p.killing.Lock()
	p.mu.Lock()
	res.TimedOut, res.Cancelled, res.Killed = p.timedOut, p.cancelled, len(p.killed)
	p.killing.Unlock()
	p.mu.Unlock()
	var err error
	if len(errs) > 0 {
		err = fmt.Errorf("sandbox cleanup: %w", joinErrs(errs))
	}
	// The tree is gone (killed, and the cgroup checked empty above): the reply need not
	// wait for removing the empty cgroups and the temp dir.
	p.Finish(res, err)
	// The caller of Wait was just made runnable on this goroutine's P; the cleanup below
	// is blocking syscalls (rmdir of cgroups, the TMPDIR's emptying) during which that P
	// is not handed on at once. Let the caller run first.
	runtime.Gosched()
	defer p.sb.cleanups.Done()
	if err := p.cleanup(); err != nil {
		p.sb.cleanupMu.Lock()
		if len(p.sb.cleanupErr) < 16 {
			p.sb.cleanupErr = append(p.sb.cleanupErr, err)
		}
		p.sb.cleanupMu.Unlock()
	}
}

// cleanup removes the run's cgroups and private tmp.
func (p *process) cleanup() error {
	p.sb.guard.remove(p.guarded...)
	// After the check of the nested repositories (wait), or a launch that failed.
	p.sb.nested.release(p.checkouts)
	p.checkouts = nil
	if p.netDetach != nil {
		p.netDetach()
		p.netDetach = nil
	}
	var errs []error
	p.awaitLeft()
	p.closeLaunchExit()
	if p.cg != nil {
		if err := p.cg.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if p.holder != nil {
		p.sb.pidns.put(p.holder)
		p.holder = nil
	}
	if p.tmpl != nil {
		if err := p.sb.templates.release(p.tmpl, p.tmp); err != nil {
			errs = append(errs, err)
		}
		p.tmpl = nil
	}
	if p.tmp != "" {
		var err error
		if p.treeGone {
			err = p.sb.tmps.put(p.tmpParent, p.spec.Name, p.tmpd)
		} else {
			err = os.RemoveAll(p.tmp)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrs(errs)
}
