// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// The thread launcher confines a child without re-executing fledge. Linux keeps most of a
// task's security state per thread (Landlock domain, no_new_privs, cwd after
// unshare(CLONE_FS), v1 cgroup membership of a single tid), and a forked child inherits
// the state of the thread that forked it. So a fresh OS thread, locked to one goroutine,
// takes on the child's confinement, forks+execs the program, and is then discarded (the
// goroutine exits still locked, which makes the runtime terminate the thread). The host's
// other threads are never touched. This saves the stub's Go runtime start (most of the
// sandbox overhead of a short command).
//
// What the thread does not take on: the command's Landlock domain, its seccomp filter and
// its rlimits (per process) are the forked child's own steps before execve (execChild, the
// session launcher's child's too). Landlock's signal scope lets a process signal its own
// domain, and this thread lives a moment past the command's start: in that domain it (and
// with it fledge) could be signalled by the command where the command sees fledge's threads
// (no pid namespace). Set by the child, the rlimits hold from the program's first
// instruction.

// errThreadStep wraps a failure on the launch thread like a stub step failure.
func threadStep(step string, err error) error {
	return fmt.Errorf("%w: %w", sandbox.ErrLaunch, &stub.StepError{Step: step, Msg: err.Error()})
}

type threadLaunch struct {
	pol     *stub.Policy
	ruleset int           // Landlock ruleset fd, made on the host side (-1: none)
	joined  bool          // the thread already sits in the v1 groups (a spare)
	before  *sandbox.Spec // its BeforeExec runs right before the fork
	dir     *os.File
	v1Tasks []string // v1 cgroup dirs the launch thread joins (children inherit them)
	v1Back  []string // where the thread returns to after the fork (same order)
	// backFDs are v1Back's tasks files, opened before the thread enters the private
	// filesystem view (which has no /sys): without them the thread could not leave the
	// run's groups, and a freezer-based tree kill would freeze a thread of fledge itself.
	backFDs []int
	files   []*os.File
	sys     *syscall.SysProcAttr
	// notify asks for the deny-list's refusals (and, with trace, the traced calls) to go
	// to a listener the host serves (kernel.Filter.Notify/Trace); the child sends the
	// listener to listenerTo (a socket of the host's table).
	notify, trace bool
	listenerTo    int
	// notifyLost says the listener could not be had (an enclosing filter holds one).
	notifyLost bool
	// pidNS is the run's pid namespace (an fd of its holder, -1: none): the thread joins it
	// for its children only (setns CLONE_NEWPID changes the namespace of the children a
	// task forks from then on, never its own), so the child is born inside it.
	pidNS int
	// netNS is the plugin session's egress namespace (an fd, -1: none): the thread joins
	// it, so the child is born inside it.
	netNS  int
	holder *pidHolder // whose namespace pidNS is (nil: none)
	// tmpl is the view template to copy (nil: build the view afresh).
	tmpl *kernel.Template
	// left is closed once the launch thread is out of the run's v1 groups (finishLaunch).
	// The move back waits for the kernel's cgroup migration (an RCU grace period, several
	// milliseconds on a loaded machine), so after a successful fork it happens after the
	// child's pid was handed back, off the exec's path; whatever later touches the run's
	// groups (a signal or kill of the tree, their removal) waits for left first.
	left     chan struct{}
	leaveTid []byte // set by a successful onThread: the thread still has to leave
	// exit is a pidfd of the launch thread (threadexit_linux.go): where it is set, the
	// thread never leaves the run's groups but exits in them, and whatever touches the
	// groups waits for its death instead of left.
	exit *os.File
	// ipcDone: the thread is in a fresh IPC namespace already (a spare made it).
	ipcDone bool
	// capsDropped: the thread's bounding set is empty already (a spare emptied it).
	capsDropped bool
	// leave: the thread migrates out of the groups even where it could exit in them
	// (Sandbox.leaveForTest).
	leave bool
}

// start launches on a fresh thread, or on the spare's parked thread when sp is set.
func (tl *threadLaunch) start(sp *spare) (*os.Process, error) {
	tl.ruleset = -1
	// With an image as the root, the rules name the image's paths: they are opened on the
	// launch thread once it is in the view (onThread), never here in the host's tree.
	if tl.pol.Landlock != nil && (tl.pol.View == nil || tl.pol.View.Root == "") {
		fd, err := kernel.LandlockRuleset(tl.pol.Landlock)
		if err != nil && sp != nil {
			// The launch is consumed before its thread is: let the parked thread go, or
			// it would wait for a job for ever (a confined thread of the host's).
			sp.release()
		}
		if errors.Is(err, kernel.ErrCoversDenied) {
			// What checkAccess refuses, seen on the path as it was opened for its rule.
			return nil, fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, err)
		}
		if err != nil {
			return nil, threadStep("landlock", err)
		}
		// The launch thread's private fd table (unshare) gets its own copy.
		defer unix.Close(fd)
		tl.ruleset = fd
	}
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	tl.left, tl.leaveTid = make(chan struct{}), nil
	var launch func()
	launch = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread is never terminated when its locked goroutine exits (it
			// is wedged instead), so it must not take on a child's confinement. Keep it
			// locked here, which forces the retry onto another thread.
			defer runtime.UnlockOSThread()
			done := make(chan struct{})
			go func() { launch(); close(done) }()
			<-done
			return
		}
		tl.exit = openThreadExit(tl.leave)
		// Never unlocked: this thread carries the child's confinement and dies with the
		// goroutine.
		pid, err := tl.onThread()
		ch <- result{pid, err}
		tl.finishLaunch()
	}
	var r result
	if sp != nil {
		sp.jobs <- tl
		lr := <-sp.results
		r = result(lr)
	} else {
		go launch()
		r = <-ch
	}
	if r.err != nil {
		return nil, r.err
	}
	// The child is ours and unreaped, so its pid cannot be reused before this handle exists.
	return os.FindProcess(r.pid)
}

// onThread confines the calling (locked, fresh) thread step by step, forks and execs the
// program from it and returns the child's pid. The steps run in a fixed order: each one
// needs what the one before it set up, or would be refused by what the one after it puts on.
func (tl *threadLaunch) onThread() (int, error) {
	sys, err := tl.unshareThread()
	if err != nil {
		return 0, err
	}
	tid := unix.Gettid()
	tidb := []byte(strconv.Itoa(tid))
	if err := tl.joinGroups(tidb); err != nil {
		return 0, err
	}
	if tl.pol.View != nil {
		// After the cgroup joins (the view has no /sys); it enters the working directory.
		if err := tl.enterView(); err != nil {
			return 0, err
		}
	}
	ruleset := tl.ruleset
	if tl.pol.Landlock != nil && ruleset < 0 {
		// The image's paths, opened in the view; the child restricts itself with them.
		// Not the cached ruleset: the cache keeps numbers of fledge's shared fd table, and
		// this thread's table is its own.
		fd, err := kernel.BuildLandlockRuleset(tl.pol.Landlock)
		if err != nil {
			tl.leaveCgroups(tidb)
			return 0, threadStep("landlock", err)
		}
		defer unix.Close(fd)
		ruleset = fd
	}
	path, err := tl.restrictThread()
	if err != nil {
		return 0, err
	}
	if tl.before != nil {
		if err := sandbox.RunBeforeExec(tl.before); err != nil {
			tl.leaveCgroups(tidb)
			return 0, err
		}
	}
	return tl.forkChild(path, ruleset, &sys, tidb)
}

// unshareThread gives the thread its own cwd, fd table and (when asked) IPC and network
// namespaces, joins the run's network and pid namespaces and enters the working directory
// (without a view). It returns the fork's attributes with the namespace flags it took over.
func (tl *threadLaunch) unshareThread() (syscall.SysProcAttr, error) {
	// A private fs_struct (cwd) for this thread: the fchdir below changes nothing for the
	// host's other threads. A network namespace asked for by the spec is entered here, by
	// the thread, because the seccomp filter below refuses namespace flags on the fork.
	sys := *tl.sys
	// A private fd table from the start too: whatever this thread opens (the cgroup fds it
	// leaves by, the view's mount handles) exists in no other thread's table, and fds the
	// host inherited without CLOEXEC (a parent's jobserver pipe, ...) are made close-on-exec
	// below before the fork.
	// The IPC namespace too: entered before the view, whose /dev/mqueue (when granted)
	// shows the namespace of the thread that mounts it.
	unshareFlags := unix.CLONE_FS | unix.CLONE_FILES
	for _, ns := range []uintptr{unix.CLONE_NEWNET, unix.CLONE_NEWIPC} {
		if sys.Cloneflags&ns != 0 {
			if ns != unix.CLONE_NEWIPC || !tl.ipcDone {
				unshareFlags |= int(ns)
			}
			sys.Cloneflags &^= ns
		}
	}
	if err := unix.Unshare(unshareFlags); err != nil {
		return sys, threadStep("unshare", err)
	}
	if tl.netNS >= 0 {
		if err := unix.Setns(tl.netNS, unix.CLONE_NEWNET); err != nil {
			return sys, threadStep("network namespace", err)
		}
	}
	if tl.pidNS >= 0 {
		if err := unix.Setns(tl.pidNS, unix.CLONE_NEWPID); err != nil {
			return sys, threadStep("pid namespace", err)
		}
	}
	if tl.dir != nil && tl.pol.View == nil {
		if err := fchdirVerified(tl.dir, tl.pol); err != nil {
			return sys, threadStep("fchdir", err)
		}
	}
	if c := sys.Credential; c != nil {
		// The child's groups and ids, taken by this thread alone (raw system calls: Go's
		// own apply them to every thread of fledge) while it still holds CAP_SETGID and
		// CAP_SETUID; the child inherits them.
		if err := setThreadCredential(c); err != nil {
			return sys, threadStep("credential", err)
		}
		sys.Credential = nil
	}
	return sys, nil
}

// setThreadCredential sets the calling thread's supplementary groups, gid and uid to c's.
func setThreadCredential(c *syscall.Credential) error {
	var groups unsafe.Pointer
	if len(c.Groups) > 0 {
		groups = unsafe.Pointer(&c.Groups[0])
	}
	if !c.NoSetGroups {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.Groups)), uintptr(groups), 0); e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGID, uintptr(c.Gid), 0, 0); e != 0 {
		return fmt.Errorf("setgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETUID, uintptr(c.Uid), 0, 0); e != 0 {
		return fmt.Errorf("setuid: %w", e)
	}
	return nil
}

// joinGroups moves the thread (tid tidb) into the run's v1 cgroups, which its child
// inherits, and opens the tasks files it leaves them by while /sys is still in its view.
func (tl *threadLaunch) joinGroups(tidb []byte) error {
	if !tl.joined {
		for _, d := range tl.v1Tasks {
			if err := os.WriteFile(d+"/tasks", tidb, 0); err != nil {
				return threadStep("cgroup", err)
			}
		}
	}
	if tl.pol.View != nil && len(tl.v1Back) > 0 && tl.exit == nil {
		for _, d := range tl.v1Back {
			fd, err := unix.Open(d+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				tl.closeBack()
				return threadStep("cgroup", err)
			}
			tl.backFDs = append(tl.backFDs, fd)
		}
	}
	return nil
}

// enterView puts the thread into the run's private filesystem view (a copy of the template
// when it fits, else built afresh) and into the working directory inside it.
func (tl *threadLaunch) enterView() error {
	dirfd := -1
	if tl.dir != nil {
		dirfd = int(tl.dir.Fd())
	}
	err := kernel.ErrTemplateUnfit
	if tl.tmpl != nil {
		err = kernel.EnterTemplate(tl.tmpl, tl.pol.View, dirfd)
	}
	if errors.Is(err, kernel.ErrTemplateUnfit) {
		err = kernel.EnterView(tl.pol.View, dirfd)
	}
	if err != nil {
		return threadStep("view", err)
	}
	return nil
}

// restrictThread sets no_new_privs, finds the program (in the view), drops capabilities
// and marks every inherited fd close-on-exec. It returns the program's path.
func (tl *threadLaunch) restrictThread() (string, error) {
	return restrictForExec(tl.pol, tl.capsDropped)
}

// restrictForExec is restrictThread's steps for any launching thread (the thread launcher's
// or the session launcher's); capsDropped says the bounding set is empty already. The
// command's Landlock domain is not made here but by the forked child (execChild), under
// the name set here: a thread that outlives the fork in the command's own domain could be
// signalled by the command (Landlock's signal scope admits its own domain).
func restrictForExec(pol *stub.Policy, capsDropped bool) (string, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", threadStep("no_new_privs", err)
	}
	path, err := stub.LookPath(pol)
	if err != nil {
		return "", threadStep("exec", err)
	}
	if pol.Landlock != nil && pol.AuditName != "" {
		// This thread dies after the launch; the child, which makes the domain, has this
		// name until it execs.
		_ = kernel.SetThreadName(pol.AuditName)
	}
	dropCaps := kernel.DropExecCaps
	if capsDropped {
		dropCaps = kernel.DropExecCapsBoundingDone
	}
	if err := dropCaps(); err != nil {
		return "", threadStep("capabilities", err)
	}
	// In the private fd table (unshared above), every fd >= 3 is now close-on-exec: fds the
	// host inherited without CLOEXEC must not reach the child; its stdio is dup'ed onto 0-2
	// by the fork.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return "", threadStep("close_fds", err)
	}
	return path, nil
}

// execChild is what the forked child of either launcher (the thread launcher's and the
// session launcher's) does itself, in this order, before execve (kernel.ExecChild): join
// the v1 groups v1 (cgroup.procs fds; none where the forking thread sits in them), take
// stdio, a session of its own, RLIMIT_CORE 0 and the run's RLIMIT_NOFILE, restrict itself
// with the command's Landlock ruleset (-1: none), and install the command's seccomp filter
// last, with its refusals' listener sent to listenerTo when notify. cgroup is the unified
// group to be born in (-1: the forking thread's). The forking thread is then never in the
// command's Landlock domain nor under its filter, and the command has its limits from its
// first instruction.
func execChild(pol *stub.Policy, path string, stdio [3]int, ruleset, cgroup int, v1 []int, notify, trace bool, listenerTo int) *kernel.ExecChild {
	nofile := pol.NoFile
	if nofile == 0 {
		nofile = stub.DefaultNoFile
	}
	c := &kernel.ExecChild{Path: path, Argv: pol.Args, Env: pol.Env, Stdio: stdio, Landlock: -1,
		CgroupFD: cgroup, CgroupProcs: v1, NoFile: nofile}
	if pol.Landlock != nil {
		c.Landlock, c.LandlockFlags = ruleset, kernel.LandlockRestrictFlags(pol.Landlock)
	}
	if kernel.SeccompSupported() {
		f := kernel.Filter{DenyUnix: pol.DenyUnix, TCPOnly: pol.TCPOnly, ConnectCheck: pol.ConnectCheck}
		if notify {
			plain := f
			c.Plain = &plain
			f.Notify, f.Trace = true, trace
			c.Listener, c.ListenerTo = true, listenerTo
		}
		c.Seccomp = &f
	}
	return c
}

// forkChild forks the program from the confined thread with the child's own steps
// (execChild) and returns its pid; a child that could not exec is reaped.
func (tl *threadLaunch) forkChild(path string, ruleset int, sys *syscall.SysProcAttr, tidb []byte) (int, error) {
	if sys.Cloneflags != 0 || sys.Setpgid || sys.Setctty || sys.Foreground || sys.Ptrace || sys.Pdeathsig != 0 {
		tl.leaveCgroups(tidb)
		return 0, threadStep("exec", errors.New("unsupported process attributes for the launch thread"))
	}
	if len(tl.files) != 3 {
		tl.leaveCgroups(tidb)
		return 0, threadStep("stdio", fmt.Errorf("%d stdio files, want 3", len(tl.files)))
	}
	// The child dups its stdio onto 0-2 from fds above them: in this thread's private
	// table, a stream that is one of fledge's own 0-2 gets a copy there first.
	var stdio [3]int
	for i, f := range tl.files {
		fd := int(f.Fd())
		if fd < 3 {
			d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
			if err != nil {
				tl.leaveCgroups(tidb)
				return 0, threadStep("stdio", err)
			}
			defer unix.Close(d)
			fd = d
		}
		stdio[i] = fd
	}
	cgroup := -1
	if sys.UseCgroupFD {
		cgroup = sys.CgroupFD
	}
	pid, lost, err := kernel.ForkExecChild(execChild(tl.pol, path, stdio, ruleset, cgroup, nil, tl.notify, tl.trace, tl.listenerTo))
	if err != nil {
		tl.leaveCgroups(tidb)
		if pid > 0 {
			// Forked, but it exited (127) before its execve: ours to reap.
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
		}
		if tl.pidNS >= 0 && errors.Is(err, syscall.ENOMEM) {
			// fork refuses with ENOMEM in a pid namespace whose init has died.
			return 0, fmt.Errorf("%w: %w", sandbox.ErrLaunch, errPidNSGone)
		}
		step := "exec"
		var ce *kernel.ExecChildError
		if errors.As(err, &ce) {
			step = ce.Step
		}
		return 0, threadStep(step, fmt.Errorf("%s: %w", path, err))
	}
	tl.notifyLost = tl.notify && lost
	// The child is born; the thread leaves the run's groups once the pid is handed back.
	tl.leaveTid = tidb
	return pid, nil
}

func fchdirVerified(dir *os.File, pol *stub.Policy) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errors.New("working directory handle is not a directory")
	}
	if (pol.DirDev != 0 || pol.DirIno != 0) && (st.Dev != pol.DirDev || st.Ino != pol.DirIno) {
		return fmt.Errorf("working directory handle changed identity (dev %d ino %d, want %d/%d)",
			st.Dev, st.Ino, pol.DirDev, pol.DirIno)
	}
	return unix.Fchdir(int(dir.Fd()))
}

// leaveDelayForTest holds the launch thread in the run's groups a while after the fork,
// before it leaves or exits (tests: whatever touches the groups must wait for it).
var leaveDelayForTest time.Duration

// finishLaunch runs on the launch thread after its result was handed back: it leaves the
// run's groups if the launch did not already, and closes left (where the thread exits in
// them instead, right before it exits: waiters then wait for its death, awaitLeft).
func (tl *threadLaunch) finishLaunch() {
	d := leaveDelayForTest
	if tl.leaveTid == nil {
		d = 0
	}
	if tl.exit != nil {
		// Exits in the groups: left first, then (tests) a thread slow to exit.
		close(tl.left)
		if d > 0 {
			time.Sleep(d)
		}
		return
	}
	if d > 0 {
		time.Sleep(d)
	}
	if tl.leaveTid != nil {
		tl.leaveCgroups(tl.leaveTid)
		tl.leaveTid = nil
	}
	close(tl.left)
}

// leaveCgroups moves the launch thread back to the host's v1 groups. Best effort: the
// thread also leaves every group when it exits, just later.
func (tl *threadLaunch) leaveCgroups(tid []byte) {
	if tl.exit != nil {
		return // the thread exits in them (threadexit_linux.go)
	}
	if len(tl.backFDs) > 0 {
		for _, fd := range tl.backFDs {
			_, _ = unix.Write(fd, tid)
		}
		tl.closeBack()
		return
	}
	for _, d := range tl.v1Back {
		_ = os.WriteFile(d+"/tasks", tid, 0)
	}
}

func (tl *threadLaunch) closeBack() {
	for _, fd := range tl.backFDs {
		_ = unix.Close(fd)
	}
	tl.backFDs = nil
}
