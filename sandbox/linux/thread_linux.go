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
// What the thread cannot do per thread: rlimits are per process, so RLIMIT_CORE and
// RLIMIT_NOFILE are set on the child with prlimit right after it starts (a window of a few
// microseconds in which the program runs with the host's limits); the stub path has no
// such window.

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
	// gate hands a clone3 gate listener to the watchdog (nil: none available).
	gate func(tid, listener int, back chan int) error
	// notify asks for the deny-list's refusals (and, with trace, the traced calls) to go
	// to a listener the host serves (kernel.Filter.Notify/Trace); the listener reaches
	// the host through listenerTo (a socket of the host's table) or, gated, back from the
	// watchdog into listenerBack.
	notify, trace bool
	listenerTo    int
	listenerBack  chan int
	// gateTID is the launch thread that handed its gate over (0: none yet).
	gateTID int
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
	// launch thread once it is in the view (restrictLaunch), never here in the host's tree.
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
	path, err := tl.restrictThread()
	if err != nil {
		return 0, err
	}
	// The filter goes on in the private table, so a gate listener exists nowhere else.
	listener, err := tl.installSeccomp(sys.UseCgroupFD)
	if err != nil {
		return 0, err
	}
	if listener >= 0 {
		defer func() {
			if listener >= 0 {
				unix.Close(listener)
			}
		}()
	}
	if tl.before != nil {
		if err := sandbox.RunBeforeExec(tl.before); err != nil {
			tl.leaveCgroups(tidb)
			return 0, err
		}
	}
	if listener >= 0 {
		// Right before the fork. Our copy is closed first, so the watchdog holds the only
		// one: if it dies, the kernel answers the pending clone3 with ENOSYS instead of
		// leaving this thread (and a stop-the-world waiting for it) stuck.
		tl.gateTID = tid
		if err := tl.gate(tid, listener, tl.listenerBack); err != nil {
			tl.leaveCgroups(tidb)
			return 0, threadStep("seccomp", err)
		}
		unix.Close(listener)
		listener = -1
	}
	return tl.forkChild(path, &sys, tidb)
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
	return sys, nil
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

// restrictThread sets no_new_privs, finds the program (in the view, before Landlock
// narrows what the thread may read), applies Landlock, drops capabilities and marks every
// inherited fd close-on-exec. It returns the program's path.
func (tl *threadLaunch) restrictThread() (string, error) {
	return restrictForExec(tl.pol, tl.ruleset, tl.capsDropped, true)
}

// restrictForExec is restrictThread's steps for any launching thread (the thread launcher's
// or the session launcher's): ruleset is the Landlock ruleset (-1: build it here),
// capsDropped says the bounding set is empty already, and !landlockHere leaves the
// restriction to the forked child (the session launcher's).
func restrictForExec(pol *stub.Policy, ruleset int, capsDropped, landlockHere bool) (string, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "", threadStep("no_new_privs", err)
	}
	path, err := stub.LookPath(pol)
	if err != nil {
		return "", threadStep("exec", err)
	}
	if pol.Landlock != nil {
		if pol.AuditName != "" {
			// This thread dies after the launch; the child's name is the program's once
			// it execs.
			_ = kernel.SetThreadName(pol.AuditName)
		}
		restrict := func() error { return kernel.RestrictLandlock(pol.Landlock, ruleset) }
		if ruleset < 0 {
			restrict = func() error { return kernel.ApplyLandlock(pol.Landlock) }
		}
		if !landlockHere {
			// The child restricts itself (kernel.ExecChild.Landlock), under the name set
			// above: a thread that outlives the fork in the command's own domain could be
			// signalled by the command (Landlock's signal scope admits its own domain).
			restrict = func() error { return nil }
		}
		if err := restrict(); err != nil {
			return "", threadStep("landlock", err)
		}
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

// installSeccomp puts the seccomp filter on the thread, in the form the launch needs: with
// a clone3 gate (clone3: the fork is a clone3), a notify listener (handed to the host
// here), both, or neither. It returns the gate's listener (-1: none), which the caller
// closes once the fork is past it.
func (tl *threadLaunch) installSeccomp(clone3 bool) (int, error) {
	listener := -1
	sys := &syscall.SysProcAttr{UseCgroupFD: clone3}
	if !kernel.SeccompSupported() {
		return listener, nil
	}
	var err error
	f := kernel.Filter{DenyUnix: tl.pol.DenyUnix, TCPOnly: tl.pol.TCPOnly, ConnectCheck: tl.pol.ConnectCheck}
	notify := kernel.Filter{DenyUnix: f.DenyUnix, TCPOnly: f.TCPOnly, ConnectCheck: f.ConnectCheck, Notify: tl.notify, Trace: tl.trace}
	switch {
	case sys.UseCgroupFD && tl.gate != nil && tl.notify:
		// One listener for both: the watchdog passes our clone3 and hands it back.
		if listener, err = kernel.InstallGatedFilter(notify); err != nil {
			return -1, threadStep("seccomp", err)
		}
	case tl.notify && (!sys.UseCgroupFD || tl.gate == nil):
		if sys.UseCgroupFD {
			notify.AllowClone3 = true // no gate: reported as degraded by Start
		}
		l, err := kernel.InstallNotifyFilter(notify)
		switch {
		case errors.Is(err, kernel.ErrListenerBusy):
			tl.notifyLost = true
			f.AllowClone3 = notify.AllowClone3
			if err := kernel.InstallFilter(f); err != nil {
				return -1, threadStep("seccomp", err)
			}
		case err != nil:
			return -1, threadStep("seccomp", err)
		default:
			// To the host now, before anything of this thread can be refused or
			// traced (its own calls wait on the listener too).
			err := unix.Sendmsg(tl.listenerTo, []byte("l"), unix.UnixRights(l), nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
			unix.Close(l)
			if err != nil {
				return -1, threadStep("seccomp", fmt.Errorf("hand the listener to the host: %w", err))
			}
		}
	case sys.UseCgroupFD && tl.gate != nil:
		// CLONE_INTO_CGROUP makes our own fork a clone3, which the filter refuses to
		// everyone else: the watchdog lets exactly this thread's call through.
		if listener, err = kernel.InstallGatedFilter(f); err != nil {
			return -1, threadStep("seccomp", err)
		}
	case sys.UseCgroupFD:
		f.AllowClone3 = true // no gate: reported as degraded by Start
		if err := kernel.InstallFilter(f); err != nil {
			return -1, threadStep("seccomp", err)
		}
	default:
		if err := kernel.InstallFilter(f); err != nil {
			return -1, threadStep("seccomp", err)
		}
	}
	return listener, nil
}

// forkChild forks and execs the program from the confined thread and sets the child's
// rlimits (per process, so not inherited from the thread); a child that cannot get them
// is killed and reaped.
func (tl *threadLaunch) forkChild(path string, sys *syscall.SysProcAttr, tidb []byte) (int, error) {
	// syscall.ForkExec, not os.StartProcess: the latter keeps a pidfd, which would live in
	// this thread's private fd table; the caller opens its own handle with FindProcess.
	fds := make([]uintptr, len(tl.files))
	for i, f := range tl.files {
		fds[i] = f.Fd()
	}
	pid, err := syscall.ForkExec(path, tl.pol.Args, &syscall.ProcAttr{Env: tl.pol.Env, Files: fds, Sys: sys})
	if err != nil {
		tl.leaveCgroups(tidb)
		if pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
		}
		if tl.pidNS >= 0 && errors.Is(err, syscall.ENOMEM) {
			// fork refuses with ENOMEM in a pid namespace whose init has died.
			return 0, fmt.Errorf("%w: %w", sandbox.ErrLaunch, errPidNSGone)
		}
		return 0, threadStep("exec", fmt.Errorf("%s: %w", path, err))
	}
	// The child is born; the thread leaves the run's groups once the pid is handed back.
	tl.leaveTid = tidb
	if err := setChildRlimits(pid, tl.pol.NoFile); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		return 0, threadStep("rlimit", err)
	}
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

func setChildRlimits(pid int, nofile uint64) error {
	if err := unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{}, nil); err != nil {
		return fmt.Errorf("core: %w", err)
	}
	if nofile == 0 {
		nofile = stub.DefaultNoFile
	}
	var cur unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &cur); err != nil {
		return fmt.Errorf("nofile: %w", err)
	}
	nofile = min(nofile, cur.Max)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		return fmt.Errorf("nofile: %w", err)
	}
	return nil
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
