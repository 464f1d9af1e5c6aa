// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// pidNamespaces are the host side of the pid-namespace holders (sandbox/stub/pidns_linux.go):
// one per sandbox name (a plugin and the commands it runs share one; two plugins never do),
// started on first use. A launch joins its holder's namespace (setns on the launch thread,
// so only its child is born there) and attaches a clone of the holder's procfs at /proc of
// its view: a command sees its own session's processes and nothing of the host's.
type pidNamespaces struct {
	exe string

	mu      sync.Mutex
	holders map[string]*pidHolder
	closed  bool
	// ahead is a holder started before any name asked for one (prestart), taken by the
	// first name that needs a holder. No name ever had it, so taking it is the same as
	// starting one then; only its start is off that name's first launch.
	ahead *pidHolder
	// aheadDone is closed once the prestart has ended (nil: none is under way).
	aheadDone chan struct{}
}

// maxPidNamespaces bounds the holders of one sandbox (one process and three fds each). A
// name beyond it gets an error, which Start reports as a degraded (or, strict, refused) run.
const maxPidNamespaces = 64

// pidNSStartBound bounds how long a holder may take to send its procfs.
const pidNSStartBound = 10 * time.Second

var errNoPidNS = errors.New("no pid namespace")

// errPidNSGone: the namespace's holder died, so the namespace takes no new process.
var errPidNSGone = errors.New("the plugin's pid namespace ended (its holder died)")

type pidHolder struct {
	proc    *os.Process
	dead    atomic.Bool // set once the holder was reaped
	procKey string      // the procfs's dev:ino
	refs    int         // runs launched into it and not yet cleaned up (under the mutex)
	last    time.Time   // when a run last took or released it (under the mutex)
	sock    int         // host end of the holder's stdin socket: closing it ends the namespace
	pidFD   int         // a pidfd of the holder (-1: none), readable once it has exited
	nsFD    int         // /proc/<holder>/ns/pid
	procFD  int         // the holder's detached procfs
}

func newPidNamespaces(exe string) *pidNamespaces {
	return &pidNamespaces{exe: exe, holders: map[string]*pidHolder{}}
}

func (n *pidNamespaces) available() bool { return n != nil && n.exe != "" }

// get returns the holder of name, starting it on first use.
func (n *pidNamespaces) get(name string) (*pidHolder, error) {
	if !n.available() {
		return nil, fmt.Errorf("%w: %w", errNoPidNS, errNoWatchdog)
	}
	n.waitAhead()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("%w: sandbox closed", errNoPidNS)
	}
	if h := n.holders[name]; h != nil {
		if h.alive() {
			h.refs++
			h.last = time.Now()
			return h, nil
		}
		h.close()
		delete(n.holders, name)
	}
	if len(n.holders) >= maxPidNamespaces && !n.evictIdleLocked() {
		return nil, fmt.Errorf("%w: %d pid namespaces in use (limit)", errNoPidNS, maxPidNamespaces)
	}
	h := n.takeAheadLocked()
	if h == nil {
		var err error
		if h, err = startPidHolder(n.exe); err != nil {
			return nil, fmt.Errorf("%w: %w", errNoPidNS, err)
		}
	}
	h.refs, h.last = 1, time.Now()
	n.holders[name] = h
	return h, nil
}

// prestart starts a holder for the first name that will ask (Sandbox.Prepare), in the
// background; at most one is ever made ahead.
func (n *pidNamespaces) prestart() {
	if !n.available() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.aheadDone != nil {
		return
	}
	done := make(chan struct{})
	n.aheadDone = done
	go func() {
		defer close(done)
		h, err := startPidHolder(n.exe)
		if err != nil {
			return // the first get starts one itself, and reports its error
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closed {
			h.close() // its socket closed: the holder exits, its namespace ends
			return
		}
		n.ahead = h
	}()
}

// aheadStart is a holder being started before its sandbox knew whether it would use one
// (earlyHolder).
type aheadStart struct {
	done chan struct{} // closed once h and err are set
	h    *pidHolder
	err  error
}

func startAhead(exe string) *aheadStart {
	a := &aheadStart{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.h, a.err = startPidHolder(exe)
	}()
	return a
}

// adopt takes a holder started early as the one made ahead; with no namespaces here
// (n nil), or already closed, it is ended once it has started.
func (n *pidNamespaces) adopt(a *aheadStart) {
	if a == nil {
		return
	}
	if n == nil {
		go func() {
			<-a.done
			if a.h != nil {
				a.h.close()
			}
		}()
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.aheadDone != nil || n.closed {
		go func() {
			<-a.done
			if a.h != nil {
				a.h.close()
			}
		}()
		return
	}
	done := make(chan struct{})
	n.aheadDone = done
	go func() {
		defer close(done)
		<-a.done
		if a.h == nil {
			return
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closed {
			a.h.close()
			return
		}
		n.ahead = a.h
	}()
}

// waitAhead waits until a holder being started ahead is ready (startPidHolder is bounded by
// pidNSStartBound), so that the first get takes it rather than starting a second.
func (n *pidNamespaces) waitAhead() {
	n.mu.Lock()
	done := n.aheadDone
	n.mu.Unlock()
	if done != nil {
		<-done
	}
}

// takeAheadLocked hands out the holder started ahead, if it is still alive (nil: none).
func (n *pidNamespaces) takeAheadLocked() *pidHolder {
	h := n.ahead
	n.ahead = nil
	if h != nil && !h.alive() {
		h.close()
		return nil
	}
	return h
}

// evictIdleLocked ends the namespace that has been idle (no run in it) longest, to make
// room for another plugin's; false when every namespace has a run in it.
func (n *pidNamespaces) evictIdleLocked() bool {
	var oldest string
	var found *pidHolder
	for name, h := range n.holders {
		if h.refs == 0 && (found == nil || h.last.Before(found.last)) {
			oldest, found = name, h
		}
	}
	if found == nil {
		return false
	}
	delete(n.holders, oldest)
	found.close()
	_ = found.proc.Kill()
	return true
}

// put releases a run's hold on h (taken by get).
func (n *pidNamespaces) put(h *pidHolder) {
	if n == nil || h == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h.refs--
	h.last = time.Now()
}

// close ends every holder: the kernel kills whatever is left in their namespaces.
func (n *pidNamespaces) close() {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.closed = true
	done := n.aheadDone
	if n.ahead != nil {
		n.ahead.close()
		n.ahead = nil
	}
	for name, h := range n.holders {
		h.close()
		delete(n.holders, name)
	}
	n.mu.Unlock()
	if done != nil {
		// A holder still being started ahead is ended by its starter, which finds the
		// namespaces closed; bounded by pidNSStartBound.
		<-done
	}
}

func startPidHolder(exe string) (*pidHolder, error) {
	h, err := launchPidHolder(exe)
	if err != nil {
		return nil, err
	}
	return h, h.ready()
}

// goHolder makes launchPidHolder start the Go holder (an exec of fledge) even where the
// forked one can start; tests set it to check both.
var goHolder atomic.Bool

// launchPidHolder starts a holder process; ready then waits for its procfs. The holder is
// forked (kernel.ForkPidHolder: no exec of fledge, about 5 ms less per session) where it
// can be; elsewhere, and should the fork fail, it is fledge re-executed (the Go holder).
func launchPidHolder(exe string) (*pidHolder, error) {
	if !goHolder.Load() {
		h, err := forkPidHolder()
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, kernel.ErrUnsupported) {
			// Not expected where the Go holder starts (it takes the same steps); that one is
			// tried, and reports its own error if it fails too.
			goHolder.Store(true)
		}
	}
	return execPidHolder(exe)
}

// forkPidHolder starts the forked holder (kernel.ForkPidHolder).
func forkPidHolder() (*pidHolder, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	pid, pidFD, err := kernel.ForkPidHolder(fds[1], stub.PidNSMarker)
	unix.Close(fds[1])
	if err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	// The pidfd from clone3 names the holder before anyone could reap it; os.FindProcess
	// opens one of its own for Wait and Kill.
	proc, err := os.FindProcess(pid)
	if err != nil {
		unix.Close(pidFD)
		unix.Close(fds[0]) // the holder reads EOF and exits
		return nil, err
	}
	h := &pidHolder{proc: proc, sock: fds[0], nsFD: -1, procFD: -1, pidFD: pidFD}
	go func() { _, _ = proc.Wait(); h.dead.Store(true) }()
	return h, nil
}

// execPidHolder starts the Go holder, fledge re-executed (sandbox/stub/pidns_linux.go).
func execPidHolder(exe string) (*pidHolder, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	child := os.NewFile(uintptr(fds[1]), "pidns")
	defer child.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	defer null.Close()
	proc, err := os.StartProcess(exe, []string{exe, stub.PidNSMarker}, &os.ProcAttr{
		Files: []*os.File{child, null, null},
		Env:   []string{},
		// A network and a mount namespace of its own too: every run of the plugin sees the
		// holder as its pid 1, and /proc/1/net shows the holder's network namespace (the
		// host's listening ports, connections, abstract unix sockets and routes, without
		// it), /proc/1/mountinfo its mounts (the holder leaves the host's for an empty root).
		Sys: &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWNS},
	})
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("start holder: %w", err)
	}
	h := &pidHolder{proc: proc, sock: fds[0], nsFD: -1, procFD: -1, pidFD: -1}
	// Before the reaper below starts: the holder is an unreaped child, its pid not reused.
	if fd, err := unix.PidfdOpen(proc.Pid, unix.PIDFD_NONBLOCK); err == nil {
		unix.CloseOnExec(fd)
		h.pidFD = fd
	}
	go func() { _, _ = proc.Wait(); h.dead.Store(true) }()
	return h, nil
}

// ready waits for the holder launched by launchPidHolder to send its procfs (bounded by
// pidNSStartBound) and opens its namespace; on an error the holder is closed (it exits).
func (h *pidHolder) ready() error {
	if err := h.receiveProc(); err != nil {
		h.close()
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(h.procFD, &st); err != nil {
		h.close()
		return fmt.Errorf("holder procfs: %w", err)
	}
	h.procKey = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	var err error
	if h.nsFD, err = unix.Open(fmt.Sprintf("/proc/%d/ns/pid", h.proc.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		h.close()
		return fmt.Errorf("holder namespace: %w", err)
	}
	return nil
}

func (h *pidHolder) receiveProc() error {
	tv := unix.NsecToTimeval(pidNSStartBound.Nanoseconds())
	_ = unix.SetsockoptTimeval(h.sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 512)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(h.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("holder did not send its procfs within %s: %w", pidNSStartBound, err)
		}
		msg := string(buf[:n])
		if n == 0 {
			return errors.New("holder exited before sending its procfs")
		}
		if msg != "proc" {
			return fmt.Errorf("holder: %s", strings.TrimPrefix(msg, "proc "))
		}
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(cmsgs) != 1 {
			return errors.New("holder sent no procfs")
		}
		fds, err := unix.ParseUnixRights(&cmsgs[0])
		if err != nil || len(fds) != 1 {
			return errors.New("holder sent no procfs")
		}
		h.procFD = fds[0]
		return nil
	}
}

// alive: the holder still runs (a killed holder took its namespace down with it). A holder
// that is exiting but not yet reaped may still look alive: a launch that then finds its
// namespace gone (errPidNSGone) drops it and retries.
func (h *pidHolder) alive() bool {
	if h.dead.Load() {
		return false
	}
	if h.pidFD >= 0 {
		// One poll instead of a signal and a read of /proc/PID/stat at every launch: a
		// pidfd is readable once its process has exited (a zombie, or reaped).
		for {
			fds := []unix.PollFd{{Fd: int32(h.pidFD), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			return err == nil && n == 0
		}
	}
	if h.proc.Signal(syscall.Signal(0)) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.proc.Pid))
	if err != nil {
		return false
	}
	st := string(b)
	f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// drop forgets name's holder h (if it is still the one), ending its namespace.
func (n *pidNamespaces) drop(name string, h *pidHolder) {
	if n == nil || h == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.holders[name] == h {
		delete(n.holders, name)
		h.close()
		_ = h.proc.Kill()
	}
}

// close ends the holder: its socket closed, it reads EOF and exits; and killed, for a
// holder that reads nothing: one stopped by SIGSTOP from outside its namespace (by a
// process of its uid) would otherwise outlive the sandbox, its namespace with it.
func (h *pidHolder) close() {
	for _, fd := range []*int{&h.sock, &h.nsFD, &h.procFD, &h.pidFD} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	if h.proc != nil && !h.dead.Load() {
		// A pidfd's kill (os.Process): never another process that took a reaped pid.
		_ = h.proc.Kill()
	}
}

// cloneProc returns a fresh detached copy of the holder's procfs (same superblock: the
// Landlock rule made on the holder's tree covers every copy).
func cloneProc(procFD int) (int, error) {
	return unix.OpenTree(procFD, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
}
