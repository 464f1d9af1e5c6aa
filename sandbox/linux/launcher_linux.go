// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// The session launcher. One small process per plugin session (sandbox name) and network
// shape, started in the background after the session's launcherAfterRuns-th launch: fledge re-executed
// with stub.LauncherMarker, born in the plugin's pid namespace, in an empty network
// namespace of its own (or the host's, for a session whose runs have the host's network),
// in a private copy of the session's view template and an IPC namespace of its own, with
// no_new_privs, not dumpable, without supplementary groups, its terminal signals ignored.
// It holds nothing of the host but its end of a private socket pair (fd 0).
//
// Per exec the host sends it one SOCK_SEQPACKET message: the policy (JSON; of its Landlock
// part only whether there is a domain and how it logs) and the run's descriptors (stdio,
// the detached trees of its working directory and TMPDIR, its Landlock ruleset, its
// unified cgroup and v1 cgroup.procs files, its network namespace) with a socket pair of
// its own for the answers. A spare thread of the launcher, which made its private fd
// table, cwd, mount and IPC namespaces and emptied its bounding set ahead (and, parked for
// a spare's groups, joined the run's v1 groups ahead), reads it and launches: the run's
// mounts, Landlock, capabilities, then, once the host says the run's decision record is
// durable (in the request itself, or a "go" after it), kernel.ForkExecParent, so the
// command is the host's child (Wait, reaping and the tree kill stay the host's), born in
// its unified cgroup and v1 groups, with its rlimits and seccomp filter set before execve
// (the listener goes to the host).
// The thread then exits; the next spare is already waiting.
//
// The launcher dies with its session (Sandbox.Close closes the socket and kills it), with
// its pid namespace (the holder), and with the host (its end of the socket closes). A
// launcher that is gone or misbehaves fails the exec that meets it (ErrLaunch); the next
// exec of the session launches from a thread, which confines exactly as much, and a new
// launcher is started after it.

// errLauncherGone: the session's launcher died or stopped answering.
var errLauncherGone = errors.New("the session's launcher is gone")

const (
	// launcherMaxRequest bounds one request (argv, env, policy): a larger one is launched
	// from a thread of the host instead.
	launcherMaxRequest = 1 << 20
	// launcherMaxFDs bounds the descriptors of one request.
	launcherMaxFDs = 32
	// launcherSpares is how many threads wait for a request.
	launcherSpares = 2
	// launcherWait bounds each wait for the launcher's answers.
	launcherWait = 10 * time.Second
	// launcherStartBound bounds the launcher's start (its first answer).
	launcherStartBound = 10 * time.Second
)

func init() { stub.RegisterLauncher(runLauncher) }

// launcherBufs are the request buffers of the launcher's threads.
var launcherBufs = sync.Pool{New: func() any { b := make([]byte, launcherMaxRequest); return &b }}

// launchRequest is the JSON part of a request; the descriptors follow in fds's order.
type launchRequest struct {
	Policy   *stub.Policy `json:"policy"`
	DirNow   string       `json:"dir_now,omitempty"`
	Writable bool         `json:"writable,omitempty"`
	Tree     bool         `json:"tree,omitempty"`
	Tmp      bool         `json:"tmp,omitempty"`
	Files    int          `json:"files,omitempty"`
	Ruleset  bool         `json:"ruleset,omitempty"`
	Cgroup   bool         `json:"cgroup,omitempty"`
	NetNS    bool         `json:"netns,omitempty"`
	NewNet   bool         `json:"new_net,omitempty"`
	V1       int          `json:"v1,omitempty"`
	Notify   bool         `json:"notify,omitempty"`
	Trace    bool         `json:"trace,omitempty"`
	// Go: the run's decision record is durable already; no "go" follows.
	Go bool `json:"go,omitempty"`
	// Park: no run yet. The thread joins the v1 groups whose tasks files follow its
	// private socket (the next run's spare groups), answers "parked" with a pidfd of
	// itself and waits on that socket for the run's request.
	Park bool `json:"park,omitempty"`
}

// launcher is the host's handle of one session launcher.
type launcher struct {
	proc    *os.Process
	pidFD   int // readable once it has exited
	sock    int // the host's end of its request socket
	tmpl    *kernel.Template
	holder  *pidHolder
	hostNet bool
	dead    atomic.Bool
	closeMu sync.Once
	// inflight are the launches handed this launcher: one that is replaced is ended only
	// after them.
	inflight sync.WaitGroup
}

// retire ends l once the launches already handed it are done.
func (l *launcher) retire() {
	go func() {
		l.inflight.Wait()
		l.close()
	}()
}

// launcherCaps are the capabilities the launcher keeps (every other one leaves its
// bounding set before it is executed, so no thread of it ever has one): mounts and
// namespaces (CAP_SYS_ADMIN; CAP_SYS_CHROOT for a mount namespace), emptying its spare
// threads' bounding sets (CAP_SETPCAP), its empty supplementary groups (CAP_SETGID),
// paths and files of other users in the view (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
// CAP_FOWNER, CAP_CHOWN), a network namespace's setup (CAP_NET_ADMIN) and rlimits
// (CAP_SYS_RESOURCE). Its commands get none of them (restrictForExec).
const launcherCaps = 1<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_SYS_CHROOT | 1<<unix.CAP_SETPCAP |
	1<<unix.CAP_SETGID | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH |
	1<<unix.CAP_FOWNER | 1<<unix.CAP_CHOWN | 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_SYS_RESOURCE

// launcherKey: a session has a launcher per network shape (the host's network, or its own).
func launcherKey(name string, hostNet bool) string {
	if hostNet {
		return name + "\x00host-net"
	}
	return name
}

func (l *launcher) alive() bool {
	if l.dead.Load() {
		return false
	}
	if l.pidFD >= 0 {
		fds := []unix.PollFd{{Fd: int32(l.pidFD), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n > 0 {
			l.dead.Store(true)
			return false
		}
	}
	return true
}

// close ends the launcher: its socket first (it exits on EOF), then SIGKILL.
func (l *launcher) close() {
	l.closeMu.Do(func() {
		l.dead.Store(true)
		unix.Close(l.sock)
		if l.pidFD >= 0 {
			_ = unix.PidfdSendSignal(l.pidFD, unix.SIGKILL, nil, 0)
			unix.Close(l.pidFD)
		}
	})
}

// launchers are a sandbox's session launchers, by sandbox name.
type launchers struct {
	mu       sync.Mutex
	m        map[string]*launcher
	starting map[string]bool
	closed   bool
	pending  sync.WaitGroup
	starts   atomic.Int64 // launchers started (tests)
	served   atomic.Int64 // runs launched by a launcher (tests)
	disabled bool         // Options: never start one (the thread launcher for every run)
	lastErr  atomic.Value // why the last start failed (error; tests, diagnostics)
	// seen counts a session's runs from a thread with one template and holder: its
	// launcher is started only at launcherAfterRuns (a session that runs its plugin and
	// a command or two never pays for one).
	seen map[string]launcherSeen
}

type launcherSeen struct {
	tmpl   *kernel.Template
	holder *pidHolder
	runs   int
}

// launcherAfterRuns is how many runs of one session (same view template and pid
// namespace) launch from a thread before its launcher is started: a launcher costs an
// exec of fledge (several milliseconds of CPU) and pays back over a few runs; a plugin's
// cold start with a command or two never needs it.
const launcherAfterRuns = 3

// forRun returns the name's launcher when it fits the run (same template, holder and
// network shape). A launcher that died is dropped and errLauncherGone returned: the run
// fails, the next one starts a new launcher.
func (ls *launchers) forRun(name string, tmpl *kernel.Template, holder *pidHolder, hostNet bool) (*launcher, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	key := launcherKey(name, hostNet)
	l := ls.m[key]
	if l == nil || ls.closed {
		return nil, nil
	}
	if l.tmpl != tmpl || l.holder != holder || !l.holder.alive() {
		// The session's view or pid namespace was replaced (a holder that died takes its
		// launcher with it): this run takes the thread launcher and a launcher for the new
		// one is started after it.
		delete(ls.m, key)
		l.retire()
		return nil, nil
	}
	if !l.alive() {
		delete(ls.m, key)
		go l.close()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, errLauncherGone)
	}
	l.inflight.Add(1)
	return l, nil
}

// startAhead starts the name's launcher in the background (once), holding the template and
// the holder until it runs.
func (s *Sandbox) startLauncherAhead(name string, vt *viewTemplate, h *pidHolder, hostNet bool) {
	ls := &s.launchers
	if ls.disabled || vt == nil || h == nil {
		return
	}
	key := launcherKey(name, hostNet)
	ls.mu.Lock()
	if ls.closed || ls.starting[key] || ls.m[key] != nil {
		ls.mu.Unlock()
		return
	}
	if ls.starting == nil {
		ls.starting, ls.m, ls.seen = map[string]bool{}, map[string]*launcher{}, map[string]launcherSeen{}
	}
	seen := ls.seen[key]
	if seen.tmpl != vt.t || seen.holder != h {
		seen = launcherSeen{tmpl: vt.t, holder: h}
	}
	seen.runs++
	ls.seen[key] = seen
	if seen.runs < launcherAfterRuns && !launcherFirstForTest {
		ls.mu.Unlock()
		return
	}
	delete(ls.seen, key)
	ls.starting[key] = true
	ls.pending.Add(1)
	ls.mu.Unlock()
	s.templates.hold(vt)
	s.pidns.hold(h)
	go func() {
		defer ls.pending.Done()
		l, err := startLauncher(s.pidns.exe, vt.t, h, hostNet)
		_ = s.templates.release(vt, "")
		s.pidns.put(h)
		if err != nil {
			ls.lastErr.Store(err)
		}
		ls.mu.Lock()
		delete(ls.starting, key)
		if err == nil && !ls.closed && ls.m[key] == nil {
			ls.m[key], l = l, nil
			ls.starts.Add(1)
		}
		ls.mu.Unlock()
		if l != nil {
			l.close()
		}
	}()
}

// closeLaunchers ends every launcher (Sandbox.Close).
func (s *Sandbox) closeLaunchers() {
	ls := &s.launchers
	ls.mu.Lock()
	ls.closed = true
	m := ls.m
	ls.m = nil
	ls.mu.Unlock()
	ls.pending.Wait()
	for _, l := range m {
		l.close()
	}
}

// startLauncher starts a launcher from a discarded thread that entered the holder's pid
// namespace, a copy of the template's mount namespace and the network namespace the
// launcher is to live in.
func startLauncher(exe string, tmpl *kernel.Template, h *pidHolder, hostNet bool) (*launcher, error) {
	if exe == "" {
		return nil, errors.New("no executable to start the launcher from")
	}
	// Opened in the host's tree; the child execs it through its own /proc.
	exeFD, err := unix.Open(exe, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("launcher executable: %w", err)
	}
	defer unix.Close(exeFD)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pair[1])
	_ = unix.SetsockoptInt(pair[0], unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*launcherMaxRequest)
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	defer unix.Close(null)
	nsFD, err := unix.FcntlInt(uintptr(h.nsFD), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	defer unix.Close(nsFD)
	var pid int
	onDiscardedThread(func() {
		if err = unix.Unshare(unix.CLONE_FS | unix.CLONE_FILES); err != nil {
			return
		}
		if !hostNet {
			if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
				err = fmt.Errorf("network namespace: %w", err)
				return
			}
		}
		if err = unix.Setns(nsFD, unix.CLONE_NEWPID); err != nil {
			err = fmt.Errorf("pid namespace: %w", err)
			return
		}
		if err = tmpl.EnterCopy(); err != nil {
			return
		}
		if err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return
		}
		// The launcher's capabilities (root's: its permitted set is this bounding set
		// after execve). The thread is discarded afterwards.
		if err = kernel.DropBoundingCapsExcept(launcherCaps); err != nil {
			return
		}
		// Nothing the host inherited without CLOEXEC reaches the launcher.
		if err = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
			return
		}
		pid, err = syscall.ForkExec("/proc/self/fd/3", []string{"fledge", stub.LauncherMarker}, &syscall.ProcAttr{
			Env:   []string{},
			Files: []uintptr{uintptr(pair[1]), uintptr(null), launcherStderr(null), uintptr(exeFD)},
			Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWIPC},
		})
	})
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("start launcher: %w", err)
	}
	proc, _ := os.FindProcess(pid)
	l := &launcher{proc: proc, sock: pair[0], pidFD: -1, tmpl: tmpl, holder: h, hostNet: hostNet}
	if fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		unix.CloseOnExec(fd)
		l.pidFD = fd
	}
	go func() { _, _ = proc.Wait(); l.dead.Store(true) }()
	// Its first answer says its spares are ready.
	tv := unix.NsecToTimeval(launcherStartBound.Nanoseconds())
	_ = unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 64)
	var n int
	for {
		n, err = unix.Read(pair[0], buf)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil || string(buf[:max(n, 0)]) != "ready" {
		l.close()
		return nil, fmt.Errorf("launcher did not start (%q, %v)", buf[:max(n, 0)], err)
	}
	return l, nil
}

// launch sends one run to the launcher and returns the command's pid (the host's child).
// The command starts only once rec (the run's decision record) is durable: when it is by
// the time the request is sent, the request says so (Go) and the launcher forks as soon as
// it is ready; otherwise the launcher prepares meanwhile and waits for a "go" sent once it
// is. notifyBack, when set, takes the command's seccomp listener; notifyLost says the child
// could not have one (an enclosing filter holds it).
func (l *launcher) launch(sock int, req *launchRequest, fds []int, rec *recordWait, notifyBack chan int) (pid int, notifyLost bool, err error) {
	done, beforeErr := rec.ready()
	if done && beforeErr != nil {
		return 0, false, beforeErr // nothing sent: no run without its record
	}
	req.Go = done
	data, err := json.Marshal(req)
	if err != nil {
		return 0, false, fmt.Errorf("%w: launcher request: %w", sandbox.ErrLaunch, err)
	}
	if len(data) > launcherMaxRequest {
		return 0, false, fmt.Errorf("%w: launcher request of %d bytes (at most %d)", sandbox.ErrLaunch, len(data), launcherMaxRequest)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false, fmt.Errorf("%w: launcher: %w", sandbox.ErrLaunch, err)
	}
	defer unix.Close(pair[0])
	tv := unix.NsecToTimeval(launcherWait.Nanoseconds())
	_ = unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	rights := unix.UnixRights(append([]int{pair[1]}, fds...)...)
	err = unix.Sendmsg(sock, data, rights, nil, unix.MSG_NOSIGNAL)
	unix.Close(pair[1])
	if err != nil {
		l.dead.Store(true)
		return 0, false, fmt.Errorf("%w: %w (%w)", sandbox.ErrLaunch, errLauncherGone, err)
	}
	if !done {
		beforeErr = rec.wait()
		word := "go"
		if beforeErr != nil {
			word = "no"
		}
		if err := unix.Sendmsg(pair[0], []byte(word), nil, nil, unix.MSG_NOSIGNAL); err != nil && beforeErr == nil {
			beforeErr = fmt.Errorf("%w: %w (%w)", sandbox.ErrLaunch, errLauncherGone, err)
		}
	}
	// Answers: the child's seccomp listener ("l", when asked for), then the launch's end
	// ("ok" with the child's pidfd, or "err").
	listenerSent := false
	for {
		msg, got, err := recvLauncher(pair[0])
		if err != nil {
			if beforeErr != nil {
				return 0, false, beforeErr
			}
			return 0, false, err
		}
		switch {
		case string(msg) == "l" && len(got) == 1 && !listenerSent && notifyBack != nil:
			listenerSent = true
			notifyBack <- got[0]
			continue
		case bytes.HasPrefix(msg, []byte("err\x00")):
			closeFDs(got)
			if beforeErr != nil {
				return 0, false, beforeErr
			}
			return 0, false, launcherStepError(msg[4:])
		case string(msg) == "ok" && len(got) == 1:
			if beforeErr != nil {
				// Cannot happen (the launcher forks only once told the record is
				// durable), but never a run without its record.
				_ = unix.PidfdSendSignal(got[0], unix.SIGKILL, nil, 0)
				reapPidfd(got[0])
				return 0, false, beforeErr
			}
			pidfd := got[0]
			defer unix.Close(pidfd)
			pid, err := pidfdPid(pidfd)
			if err != nil {
				_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
				reapPidfd(pidfd)
				return 0, false, fmt.Errorf("%w: launcher: %w", sandbox.ErrLaunch, err)
			}
			return pid, notifyBack != nil && !listenerSent, nil
		default:
			for _, fd := range got {
				if string(msg) == "ok" || string(msg) == "err" {
					reapPidfd(fd)
				} else {
					unix.Close(fd)
				}
			}
			l.dead.Store(true)
			return 0, false, fmt.Errorf("%w: %w (unexpected answer %q)", sandbox.ErrLaunch, errLauncherGone, msg)
		}
	}
}

// recvLauncher reads one answer (bounded in size, time and descriptors).
func recvLauncher(fd int) ([]byte, []int, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return nil, nil, fmt.Errorf("%w: %w (no answer: %v)", sandbox.ErrLaunch, errLauncherGone, err)
		}
		var fds []int
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for i := range msgs {
					if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
						fds = append(fds, f...)
					}
				}
			}
		}
		return buf[:n], fds, nil
	}
}

// launcherStepError turns the launcher's "step\x00message" into the thread launcher's error.
func launcherStepError(b []byte) error {
	step, msg, _ := bytes.Cut(b, []byte{0})
	switch string(step) {
	case "pidns":
		return fmt.Errorf("%w: %w", sandbox.ErrLaunch, errPidNSGone)
	case stepUnfit:
		return fmt.Errorf("%w (the launcher: %s)", kernel.ErrTemplateUnfit, msg)
	}
	return threadStep(string(step), errors.New(string(msg)))
}

// pidfdPid reads the pid (in this process's pid namespace) a pidfd refers to: one ioctl
// (Linux 6.13), else its fdinfo (an open, a read and a close of a /proc file).
func pidfdPid(pidfd int) (int, error) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_PID}
	if unix.IoctlPidfdInfo(pidfd, &info) == nil && info.Mask&unix.PIDFD_INFO_PID != 0 && info.Tgid > 0 {
		return int(info.Tgid), nil
	}
	return pidfdPidFdinfo(pidfd)
}

// pidfdPidFdinfo is pidfdPid from the pidfd's fdinfo.
func pidfdPidFdinfo(pidfd int) (int, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("Pid:")); ok {
			pid, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("pidfd: pid %q", bytes.TrimSpace(v))
			}
			return pid, nil
		}
	}
	return 0, errors.New("pidfd: no pid")
}

// reapPidfd reaps the child pidfd refers to (a child of this process) and closes it.
func reapPidfd(pidfd int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED, nil)
		if err != unix.EINTR {
			break
		}
	}
	unix.Close(pidfd)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// --- the launcher process ---

// runLauncher is the launcher's main (stub.MaybeRun with stub.LauncherMarker).
func runLauncher() int {
	unix.Close(3) // the executable it was started through
	// No signal is ignored here: an ignored signal stays ignored in the commands it forks
	// (CLONE_CLEAR_SIGHAND resets handlers only). It is in a session of its own (no
	// terminal's signals), and the commands cannot signal it (Landlock's scope).
	// Its /proc entries (mem, environ, fds, root) need CAP_SYS_PTRACE, which no command has.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 2
	}
	if os.Getpid() == 1 {
		return 2 // CLONE_PARENT is refused to a namespace's init
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return 2
	}
	// Go's poller makes its epoll fd on first use: in the shared fd table now, before a
	// spare unshares its own (a poller born in a spare's private table would be gone for
	// every other thread).
	if r, w, err := os.Pipe(); err == nil {
		_ = r.SetReadDeadline(time.Now())
		r.Close()
		w.Close()
	}
	for range launcherSpares {
		go launcherSpare()
	}
	if _, err := unix.Write(0, []byte("ready")); err != nil {
		return 0
	}
	for {
		time.Sleep(time.Hour)
	}
}

// launcherSpare is one waiting thread: it makes what every run's thread needs ahead, waits
// for a request, starts the next spare and launches. It never returns its thread to Go's
// pool (it exits locked, so the runtime ends it).
func launcherSpare() {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread is wedged rather than ended when its locked goroutine exits.
		defer runtime.UnlockOSThread()
		done := make(chan struct{})
		go func() { launcherSpare(); close(done) }()
		<-done
		return
	}
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_NEWNS | unix.CLONE_NEWIPC); err != nil {
		os.Exit(3)
	}
	capsDropped := kernel.DropBoundingCaps() == nil
	// One buffer per waiting thread, reused: a fresh megabyte per request was zeroed and
	// faulted in every time, grew the heap the fork copies and ran the collector.
	bufp := launcherBufs.Get().(*[]byte)
	defer launcherBufs.Put(bufp)
	buf := *bufp
	oob := make([]byte, unix.CmsgSpace(4*launcherMaxFDs))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = unix.Recvmsg(0, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil || n == 0 {
		os.Exit(0) // the host closed its end, or died
	}
	go launcherSpare()
	launcherHandle(buf, n, oob[:oobn], flags, capsDropped, true)
}

// launcherHandle serves one request: a run, or (parkOK) a park, after which the same
// thread waits on its private socket for the run.
func launcherHandle(buf []byte, n int, oob []byte, flags int, capsDropped, parkOK bool) {
	var fds []int
	if len(oob) > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
			for i := range msgs {
				if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if len(fds) == 0 {
		return // no answer socket: nothing to answer to
	}
	reply := fds[0]
	defer closeFDs(fds)
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		launcherFail(reply, "request", errors.New("request truncated"))
		return
	}
	var req launchRequest
	if err := json.Unmarshal(buf[:n], &req); err != nil || (req.Policy == nil && !req.Park) || (req.Park && !parkOK) {
		launcherFail(reply, "request", fmt.Errorf("bad request: %v", err))
		return
	}
	if req.Park {
		parkThread(reply, fds[1:], buf, capsDropped)
		return
	}
	if step, err := launchRequested(&req, fds[1:], reply, capsDropped); err != nil {
		launcherFail(reply, step, err)
		if !req.Go {
			// The host's word is still to come: closing the socket with it unread would
			// reset the connection, and the host would read "launcher gone" instead of
			// the failure just sent.
			_ = launcherAwaitGo(reply)
		}
	}
}

// stepUnfit is the step a launcher names when the run's working directory could not be
// mounted in its copy of the view (kernel.ErrTemplateUnfit): its path kept changing under
// the thread. The host launches that run from a thread instead.
const stepUnfit = "unfit"

// parkThread joins the calling thread to the v1 groups of tasks (the next run's: the
// migration's wait for an RCU grace period happens now, off that run's path), tells the
// host with a pidfd of the thread, and launches the run that comes on priv. EOF on priv
// releases it: the thread exits in the groups, and the host waits for that.
func parkThread(priv int, tasks []int, buf []byte, capsDropped bool) {
	for _, fd := range tasks {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			launcherFail(priv, "cgroup", err)
			return
		}
	}
	tfd, err := unix.PidfdOpen(unix.Gettid(), pidfdThread)
	if err != nil {
		launcherFail(priv, "cgroup", err)
		return
	}
	err = unix.Sendmsg(priv, []byte("parked"), unix.UnixRights(tfd), nil, unix.MSG_NOSIGNAL)
	unix.Close(tfd)
	if err != nil {
		return
	}
	oob := make([]byte, unix.CmsgSpace(4*launcherMaxFDs))
	var n, oobn, flags int
	for {
		n, oobn, flags, _, err = unix.Recvmsg(priv, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil || n == 0 {
		return // released unused
	}
	launcherHandle(buf, n, oob[:oobn], flags, capsDropped, false)
}

// launcherAwaitGo waits for the host's word that the run may start ("go"; anything else,
// or the host gone, is no).
func launcherAwaitGo(reply int) error {
	buf := make([]byte, 16)
	for {
		n, err := unix.Read(reply, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || string(buf[:max(n, 0)]) != "go" {
			return fmt.Errorf("the host did not let the run start (%q, %v)", buf[:max(n, 0)], err)
		}
		return nil
	}
}

func launcherFail(reply int, step string, err error) {
	msg := "err\x00" + step + "\x00" + err.Error()
	if len(msg) > 4000 {
		msg = msg[:4000]
	}
	_ = unix.Sendmsg(reply, []byte(msg), nil, nil, unix.MSG_NOSIGNAL)
}

// runFDs are a request's descriptors, in the order the host sends them (-1, nil: absent).
type runFDs struct {
	stdio   [3]int
	mounts  []int // the detached trees of the working directory and TMPDIR, and their files
	ruleset int
	cgroup  int
	netns   int
	v1      []int // cgroup.procs files of the run's v1 groups
}

// takeRunFDs splits fds as req says they come.
func takeRunFDs(req *launchRequest, fds []int) (runFDs, error) {
	r := runFDs{ruleset: -1, cgroup: -1, netns: -1}
	take := func(n int) ([]int, error) {
		if n < 0 || n > len(fds) {
			return nil, errors.New("descriptor missing")
		}
		out := fds[:n]
		fds = fds[n:]
		return out, nil
	}
	one := func(has bool, to *int) error {
		if !has {
			return nil
		}
		f, err := take(1)
		if err == nil {
			*to = f[0]
		}
		return err
	}
	stdio, err := take(3)
	if err != nil {
		return r, err
	}
	copy(r.stdio[:], stdio)
	mounts := req.Files
	if req.Tree {
		mounts++
	}
	if req.Tmp {
		mounts++
	}
	if r.mounts, err = take(mounts); err != nil {
		return r, err
	}
	if err := one(req.Ruleset, &r.ruleset); err != nil {
		return r, err
	}
	if err := one(req.Cgroup, &r.cgroup); err != nil {
		return r, err
	}
	if err := one(req.NetNS, &r.netns); err != nil {
		return r, err
	}
	r.v1, err = take(req.V1)
	return r, err
}

// launchRequested runs one launch on the calling spare thread; on error it returns the
// failed step.
func launchRequested(req *launchRequest, fds []int, reply int, capsDropped bool) (string, error) {
	r, err := takeRunFDs(req, fds)
	if err != nil {
		return "request", err
	}
	pol := req.Policy
	if pol.View == nil {
		return "request", errors.New("no view")
	}
	if step, err := enterRun(req, &r); err != nil {
		return step, err
	}
	if pol.Landlock != nil && r.ruleset < 0 {
		return "landlock", errors.New("no ruleset")
	}
	// The Landlock domain is the child's own (kernel.ExecChild.Landlock): this thread
	// lives on past the command's execve, and Landlock's signal scope lets a process
	// signal its own domain, so in the command's domain it could be killed (the whole
	// launcher with it) or stopped by the command.
	path, err := restrictForExec(pol, capsDropped)
	if err != nil {
		return stepOf(err)
	}
	// Nothing starts before the host says the run's decision record is durable.
	if !req.Go {
		req.Go = true // the host's word is taken, whatever it is
		if err := launcherAwaitGo(reply); err != nil {
			return "before exec", err
		}
	}
	return forkRun(req, &r, path, reply)
}

// enterRun puts the calling thread into the run's network namespace and mounts.
func enterRun(req *launchRequest, r *runFDs) (string, error) {
	switch {
	case r.netns >= 0:
		if err := unix.Setns(r.netns, unix.CLONE_NEWNET); err != nil {
			return "network namespace", err
		}
	case req.NewNet:
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return "network namespace", err
		}
	}
	rm, err := kernel.RunMountsFrom(req.DirNow, req.Writable, req.Tree, req.Tmp, append([]int{}, r.mounts...))
	if err != nil {
		return "request", err
	}
	if err := kernel.EnterRunMounts(req.Policy.View, rm); err != nil {
		if errors.Is(err, kernel.ErrTemplateUnfit) {
			return stepUnfit, err // the host launches it from a thread, in a view built afresh
		}
		return "view", err
	}
	return "", nil
}

// forkRun forks the command (kernel.ForkExecParent with the child's own steps, execChild:
// its rlimits, Landlock domain and seccomp filter, then execve) and answers the host with
// its pidfd. The filter goes on in the child, as its last step before execve, so this
// thread forks unfiltered: its own clone3 is never refused.
func forkRun(req *launchRequest, r *runFDs, path string, reply int) (string, error) {
	pol := req.Policy
	pidfd, err := kernel.ForkExecParent(execChild(pol, path, r.stdio, r.ruleset, r.cgroup, r.v1, req.Notify, req.Trace, reply))
	if pidfd < 0 {
		if errors.Is(err, unix.ENOMEM) {
			return "pidns", err // fork refuses with ENOMEM in a pid namespace whose init died
		}
		return "exec", err
	}
	msg := []byte("ok")
	if err != nil {
		var ce *kernel.ExecChildError
		step := "exec"
		if errors.As(err, &ce) {
			step = ce.Step
		}
		msg = []byte("err\x00" + step + "\x00" + path + ": " + err.Error())
	}
	err = unix.Sendmsg(reply, msg, unix.UnixRights(pidfd), nil, unix.MSG_NOSIGNAL)
	unix.Close(pidfd)
	if err != nil {
		return "reply", err
	}
	return "", nil
}

// stepOf splits a threadStep error into its step and message.
func stepOf(err error) (string, error) {
	var se *stub.StepError
	if errors.As(err, &se) {
		return se.Step, errors.New(se.Msg)
	}
	return "launch", err
}

// hold keeps vt open for a launcher being started (release gives it back).
func (c *viewTemplates) hold(vt *viewTemplate) {
	c.mu.Lock()
	vt.refs++
	c.mu.Unlock()
}

// hold keeps h's namespace counted as in use for a launcher being started (put gives it
// back).
func (n *pidNamespaces) hold(h *pidHolder) {
	n.mu.Lock()
	h.refs++
	h.last = time.Now()
	n.mu.Unlock()
}

// has reports whether name has a launcher (its runs then take spares without a thread).
func (ls *launchers) has(name string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[launcherKey(name, false)] != nil || ls.m[launcherKey(name, true)] != nil
}

// launchVia launches p's run through the session's launcher l. kernel.ErrTemplateUnfit:
// the launcher started nothing (the caller launches from a thread, which builds the view
// afresh); the run's decision record is written when p.recorded says so.
func (s *Sandbox) launchVia(l *launcher, spec *sandbox.Spec, p *process, pol *stub.Policy, sys *syscall.SysProcAttr, tl *threadLaunch, sp *spare) (*os.Process, error) {
	defer l.inflight.Done()
	// A return before the parked thread is taken (takeParked) lets it go: the caller
	// drops the spare, and nothing else would release it.
	defer sp.releasePark()
	dirfd := -1
	if spec.Dir != nil {
		dirfd = int(spec.Dir.Fd())
	}
	rm, err := kernel.PrepareRunMounts(p.tmpl.t, pol.View, dirfd)
	if err != nil {
		if errors.Is(err, kernel.ErrTemplateUnfit) {
			return nil, err
		}
		return nil, threadStep("view", err)
	}
	defer rm.Close()
	// From here the run goes to the launcher or fails: its decision record is awaited on
	// a goroutine of its own, so the request can say whether it is durable already, and
	// every return below waits for it (a caller that launches again from a thread must
	// not find it half done).
	rec := awaitRecord(spec)
	p.recorded = true
	defer rec.wait()
	req, fds, closeReq, err := runRequest(spec, pol, sys, tl, rm)
	defer closeReq()
	if err != nil {
		return nil, err
	}
	sock := p.takeParked(l, sp)
	if sock >= 0 {
		defer unix.Close(sock)
	} else {
		sock = l.sock
		// No thread parked in the run's v1 groups: the child joins them itself.
		for _, f := range pol.CgroupProcs {
			fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, threadStep("cgroup", err)
			}
			defer unix.Close(fd)
			req.V1++
			fds = append(fds, fd)
		}
	}
	back := p.launcherNotify(spec, pol, req)
	// After launcherNotify, which names the run for its Landlock records (AuditName).
	req.Policy = launcherPolicy(pol)
	pid, notifyLost, err := l.launch(sock, req, fds, rec, back)
	p.launcherNotifyDone(notifyLost, err)
	if errors.Is(err, errLauncherGone) {
		s.launchers.drop(spec.Name, l)
	}
	if err != nil {
		return nil, err
	}
	s.launchers.served.Add(1)
	p.tmpl.t.NoteEntered()
	// The child is ours and unreaped, so its pid cannot be reused before this handle exists.
	return os.FindProcess(pid)
}

// runRequest is the request of one run (its policy is set last) and its descriptors (stdio, the run's mounts, its
// Landlock ruleset, unified cgroup and network namespace); done closes those it opened.
func runRequest(spec *sandbox.Spec, pol *stub.Policy, sys *syscall.SysProcAttr, tl *threadLaunch, rm *kernel.RunMounts) (req *launchRequest, fds []int, done func(), err error) {
	done = func() {}
	req = &launchRequest{DirNow: rm.DirNow, Writable: rm.Writable,
		Tree: rm.Tree >= 0, Tmp: rm.TmpTree >= 0, Files: len(rm.Files)}
	fds = make([]int, 0, 12)
	for _, f := range tl.files {
		fds = append(fds, int(f.Fd()))
	}
	fds = append(fds, rm.FDs()...)
	if pol.Landlock != nil {
		fd, err := kernel.LandlockRuleset(pol.Landlock)
		if errors.Is(err, kernel.ErrCoversDenied) {
			return nil, nil, done, fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, err)
		}
		if err != nil {
			return nil, nil, done, threadStep("landlock", err)
		}
		done = func() { unix.Close(fd) }
		req.Ruleset = true
		fds = append(fds, fd)
	}
	if sys.UseCgroupFD {
		req.Cgroup = true
		fds = append(fds, sys.CgroupFD)
	}
	switch {
	case tl.netNS >= 0:
		req.NetNS = true
		fds = append(fds, tl.netNS)
	case sys.Cloneflags&unix.CLONE_NEWNET != 0:
		req.NewNet = true
	}
	return req, fds, done, nil
}

// launcherPolicy is what of pol the launcher needs. Its Landlock rules are in the ruleset
// sent along (built and cached here): the request carries whether there is a domain and
// how it logs, not the path lists (two thirds of a request, decoded by the launcher for
// every run).
func launcherPolicy(pol *stub.Policy) *stub.Policy {
	if pol.Landlock == nil {
		return pol
	}
	c := *pol
	c.Landlock = &kernel.Landlock{ABI: pol.Landlock.ABI, LogExec: pol.Landlock.LogExec}
	return &c
}

// takeParked returns the socket of l's thread parked in sp's v1 groups, for the caller to
// close (-1: none, or another launcher's, which is released). The parked thread ends in the run's groups
// (launched from, or released): the run's cleanup waits for its death before it touches
// them.
func (p *process) takeParked(l *launcher, sp *spare) int {
	if sp == nil || sp.park == nil {
		return -1
	}
	sock := -1
	if sp.park.l == l {
		sock = sp.park.sock // the caller's now, closed once the launch has its answer
		sp.park.sock = -1
	} else {
		sp.park.release()
	}
	left := make(chan struct{})
	close(left)
	p.left, p.launchExit = left, sp.park.exit
	sp.park.exit = nil
	return sock
}

// launcherNotify prepares the run's kernel refusal records (the child's seccomp listener
// comes back on the returned channel; nil: none).
func (p *process) launcherNotify(spec *sandbox.Spec, pol *stub.Policy, req *launchRequest) chan int {
	rn := newRunNotify(spec, pol)
	if rn == nil || !kernel.SeccompSupported() {
		return nil
	}
	if err := rn.prepare(nil, true, spec.Trace); err != nil {
		p.mode.Degraded = append(p.mode.Degraded, "kernel refusal records ("+err.Error()+")")
		return nil
	}
	p.notify = rn
	rn.watchLandlock(pol)
	req.Notify, req.Trace = true, spec.Trace
	return rn.ch
}

// launcherNotifyDone settles the run's kernel refusal records after the launch.
func (p *process) launcherNotifyDone(notifyLost bool, err error) {
	if p.notify == nil {
		return
	}
	if notifyLost {
		p.mode.Degraded = append(p.mode.Degraded, "kernel refusal records (an enclosing sandbox holds the seccomp listener)")
		p.notify.abort()
		p.notify = nil
		return
	}
	if err != nil {
		p.notify.abort()
		p.notify = nil
		return
	}
	p.notify.launched()
}

// recordWait is a run's BeforeExec (its decision record made durable) on a goroutine of its
// own: ready asks without waiting whether it is done.
type recordWait struct {
	done chan struct{}
	err  error
}

func awaitRecord(spec *sandbox.Spec) *recordWait {
	r := &recordWait{done: make(chan struct{})}
	if spec.BeforeExec == nil {
		close(r.done)
		return r
	}
	go func() {
		r.err = sandbox.RunBeforeExec(spec)
		close(r.done)
	}()
	return r
}

// ready reports whether the record is settled, and its error if so.
func (r *recordWait) ready() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

func (r *recordWait) wait() error {
	<-r.done
	return r.err
}

// drop forgets l (found gone during a launch): the session's next run starts a new one.
func (ls *launchers) drop(name string, l *launcher) {
	ls.mu.Lock()
	if key := launcherKey(name, l.hostNet); ls.m[key] == l {
		delete(ls.m, key)
	}
	ls.mu.Unlock()
	go l.close()
}

// launchFromThread launches p's run from a thread of fledge (thread_linux.go), on the
// spare's parked thread when sp has one; join points tl at the session's pid namespace and
// template again after a holder died.
func (s *Sandbox) launchFromThread(spec *sandbox.Spec, p *process, tl *threadLaunch, sp *spare, join func() error) error {
	pol := tl.pol
	if rn := newRunNotify(spec, pol); rn != nil && kernel.SeccompSupported() {
		if err := rn.prepare(tl, false, spec.Trace); err != nil {
			tl.notify = false
			p.mode.Degraded = append(p.mode.Degraded, "kernel refusal records ("+err.Error()+")")
		} else {
			p.notify = rn
			rn.watchLandlock(pol)
		}
	}
	launchOn := sp
	if sp != nil && sp.bare {
		// Groups only: the launch thread joins them itself. A launcher thread parked in
		// them (for a command; this is the session's plugin process) is let go: it would
		// stay in the run's groups and its socket in fledge for as long as both live. It
		// dies while the run launches; the run waits for that before it touches the groups.
		if sp.park != nil {
			p.letGo = sp.park.letGo()
		}
		launchOn = nil
	}
	var err error
	p.proc, err = tl.start(launchOn)
	p.left, p.launchExit = tl.left, tl.exit
	if errors.Is(err, errPidNSGone) {
		// The holder died after it was looked up (killed, the OOM killer): its
		// namespace takes no new process. Once more, with a new holder, on a fresh
		// thread; the audit record (BeforeExec) was already written.
		s.pidns.drop(spec.Name, tl.holder)
		s.pidns.put(tl.holder)
		p.holder, tl.holder = nil, nil
		if p.tmpl != nil {
			_ = s.templates.release(p.tmpl, "")
			p.tmpl, tl.tmpl = nil, nil
		}
		tl.before, tl.joined, tl.ipcDone, tl.capsDropped = nil, false, false, false
		// The failed launch thread out of the groups before the next one joins them.
		p.awaitLeft()
		p.closeLaunchExit()
		tl.exit = nil
		err = join()
		p.holder = tl.holder
		if err == nil {
			p.proc, err = tl.start(nil)
			p.left, p.launchExit = tl.left, tl.exit
		}
	}
	if p.notify != nil {
		if err != nil || tl.notifyLost {
			if tl.notifyLost {
				p.mode.Degraded = append(p.mode.Degraded, "kernel refusal records (an enclosing sandbox holds the seccomp listener)")
			}
			p.notify.abort()
			p.notify = nil
		} else {
			p.notify.launched()
		}
	}
	return err
}

// launcherStderr is the launcher's stderr: /dev/null, or fledge's own where
// FLEDGE_LAUNCHER_DEBUG is set (a crash's trace).
func launcherStderr(null int) uintptr {
	if os.Getenv("FLEDGE_LAUNCHER_DEBUG") != "" {
		return 2
	}
	return uintptr(null)
}

// launcherFirstForTest makes a session's first run start its launcher and go through it
// (tests: every attack test of the package runs through the launcher with it).
var launcherFirstForTest bool

// startLauncherNow starts name's launcher and waits for it (launcherFirstForTest).
func (s *Sandbox) startLauncherNow(name string, vt *viewTemplate, h *pidHolder, hostNet bool) *launcher {
	s.startLauncherAhead(name, vt, h, hostNet)
	s.launchers.pending.Wait()
	l, _ := s.launchers.forRun(name, vt.t, h, hostNet)
	return l
}

// launcherPark is a thread of a session's launcher parked in a spare's v1 groups.
type launcherPark struct {
	l    *launcher
	sock int      // the host's end of the thread's private socket
	exit *os.File // a pidfd of the thread (nil: handed to the run that used it)
}

// release lets the parked thread go unused and waits for its death (it leaves the groups
// as it exits).
func (pk *launcherPark) release() {
	if pk.sock >= 0 {
		unix.Close(pk.sock)
		pk.sock = -1
	}
	if pk.exit != nil {
		threadGone(pk.exit, leaveWait)
		_ = pk.exit.Close()
		pk.exit = nil
	}
}

// letGo closes the parked thread's socket, which ends the thread, without waiting for its
// death: its pidfd is the caller's, to wait on before it touches the groups (nil: none).
func (pk *launcherPark) letGo() *os.File {
	if pk.sock >= 0 {
		unix.Close(pk.sock)
		pk.sock = -1
	}
	exit := pk.exit
	pk.exit = nil
	return exit
}

// releasePark lets a launcher thread parked in sp's groups go unused and waits for its
// death (nothing when none is parked, or a run took it: takeParked).
func (sp *spare) releasePark() {
	if sp != nil && sp.park != nil {
		sp.park.release()
	}
}

// parkIn parks a thread of the name's launcher in rc's v1 groups (nil: no launcher, no v1
// groups, or it failed: the run's child joins them itself).
func (s *Sandbox) parkIn(name string, hostNet bool, rc *runCgroup) *launcherPark {
	run, _ := rc.v1Dirs()
	if len(run) == 0 {
		return nil
	}
	s.launchers.mu.Lock()
	l := s.launchers.m[launcherKey(name, hostNet)]
	s.launchers.mu.Unlock()
	if l == nil || !l.alive() {
		return nil
	}
	fds := make([]int, 0, len(run))
	defer func() { closeFDs(fds) }()
	for _, d := range run {
		fd, err := unix.Open(d+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil
		}
		fds = append(fds, fd)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	err = unix.Sendmsg(l.sock, []byte(`{"park":true}`), unix.UnixRights(append([]int{pair[1]}, fds...)...), nil, unix.MSG_NOSIGNAL)
	unix.Close(pair[1])
	if err != nil {
		unix.Close(pair[0])
		return nil
	}
	tv := unix.NsecToTimeval(launcherWait.Nanoseconds())
	_ = unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	msg, got, err := recvLauncher(pair[0])
	if err != nil || string(msg) != "parked" || len(got) != 1 {
		closeFDs(got)
		unix.Close(pair[0])
		return nil
	}
	return &launcherPark{l: l, sock: pair[0], exit: os.NewFile(uintptr(got[0]), "launcher thread")}
}
