// SPDX-License-Identifier: MIT

package stub

import (
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// The host-death watchdog. Sandboxed processes run in their own sessions and cgroups, so
// nothing ties them to the host process: if fledge is killed (kill -9, the OOM killer, a
// crash), a running command would go on, unsupervised and past every timeout. A parent-
// death signal cannot cover it: the Linux thread launcher forks from a throwaway thread,
// and PR_SET_PDEATHSIG fires when that *thread* exits, right after the fork; and it would
// reach the main process only, never its children.
//
// So the host starts one watchdog per sandbox: this executable again, with WatchdogMarker
// as argv[1], in its own session (terminal signals do not reach it). The host tells it,
// over a SOCK_SEQPACKET socket on its stdin (one record per message), which cgroups and
// process groups hold running trees ("+cg DIR", "+pg PGID", and "-..." once a tree is
// gone) before it starts each tree. The host's end is its only other end (close-on-exec),
// so when the host dies by any signal, the kernel closes it and the watchdog reads EOF at
// once: it kills every member of every registered cgroup (cgroup.kill where there is one,
// SIGKILL per process until the groups are empty) and every registered process group,
// removes the emptied cgroups, and exits. A host that closes the sandbox normally closes
// the socket too, with nothing left registered.
//
// The watchdog also answers the seccomp clone3 gate ("gate TID" with the listener fd
// attached, see kernel.InstallGatedFilter): that must happen outside the host process,
// whose Go scheduler cannot run an answering goroutine while the launching thread waits
// in a raw vfork.

// WatchdogMarker is argv[1] of the host-death watchdog; argv[2] is the host's pid, which
// the watchdog never signals.
const WatchdogMarker = "__fledge_sandbox_watchdog__"

// WatchdogMaxMessage bounds one message to the watchdog: a record, or several
// registration records ("+cg", "-cg", "+pg", "-pg") separated by NUL bytes, which the host
// sends together so the watchdog wakes once for a run's groups instead of once per group.
const WatchdogMaxMessage = maxWatchLine

// Bounds of the watchdog's protocol and of its cleanup.
const (
	maxWatchLine    = 4096
	maxWatchEntries = 1 << 16
	watchKillFor    = 5 * time.Second // give up on a group that will not empty after this
)

func isWatchdog(args []string) bool { return len(args) > 2 && args[1] == WatchdogMarker }

// gateTimeout bounds one clone3 gate: the launch thread forks right after handing over
// the listener, and a launch that fails first drops the filter's last user (poll HUP).
// Gates are served concurrently, so one launch never waits for another's gate.
const gateTimeout = 10 * time.Second

// maxGates bounds the gates open at once (one per launch between its hand-over and its
// fork); a gate beyond it is closed at once, so that launch's clone3 fails with ENOSYS.
const maxGates = 1024

// pendingGate is a clone3 gate handed over and not yet passed by its launch thread.
type pendingGate struct {
	fd, tid  int
	deadline time.Time
	// back: once the gate is passed, the listener goes back to the host, which serves the
	// run's refusals on it (kernel.Filter.Notify), instead of being closed.
	back bool
}

// runWatchdog is the watchdog's whole life; it returns the exit code.
//
// One poll loop serves the control socket and every open gate at once. Gates must not be
// served one after another: launch threads of the same host hand over their gates in one
// order and reach clone3 in another, and a thread waiting in its clone3 (raw vfork, not
// preemptible) blocks every stop-the-world of the host, so the other launch threads stop
// too; a watchdog waiting for one of those to fork never answered the clone3 that was
// pending, until the gate's timeout, and that launch then failed with ENOSYS.
func runWatchdog(args []string) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE)
	host, err := strconv.Atoi(args[2])
	if err != nil || host <= 1 {
		return 2
	}
	cgs := map[string]bool{}
	pgs := map[int]bool{}
	var gates []pendingGate
	defer func() {
		for _, g := range gates {
			unix.Close(g.fd)
		}
	}()
	buf := make([]byte, maxWatchLine)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		pfds := make([]unix.PollFd, 0, 1+len(gates))
		pfds = append(pfds, unix.PollFd{Fd: 0, Events: unix.POLLIN})
		wait := -1
		now := time.Now()
		for _, g := range gates {
			pfds = append(pfds, unix.PollFd{Fd: int32(g.fd), Events: unix.POLLIN})
			ms := int(g.deadline.Sub(now)/time.Millisecond) + 1
			if wait < 0 || ms < wait {
				wait = max(ms, 0)
			}
		}
		if _, err := unix.Poll(pfds, wait); err != nil && err != unix.EINTR {
			break
		}
		gates = serveGates(gates, pfds[1:])
		if pfds[0].Revents == 0 {
			continue
		}
		n, oobn, _, _, err := unix.Recvmsg(0, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil || n == 0 {
			break // EOF: the host is gone or done
		}
		var fds []int
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if rights, err := unix.ParseUnixRights(&m); err == nil {
						fds = append(fds, rights...)
					}
				}
			}
		}
		msg := string(buf[:n])
		if strings.HasPrefix(msg, "gate ") {
			fds = handleGate(msg, fds, &gates)
		} else {
			// One or more registration records, NUL-separated (no path holds a NUL).
			for _, rec := range strings.Split(msg, "\x00") {
				handleRecord(rec, cgs, pgs, host)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	killRegistered(cgs, pgs, host)
	return 0
}

// handleGate takes a gate listener (the message's one fd) and returns the fds left to
// close.
func handleGate(msg string, fds []int, gates *[]pendingGate) []int {
	val := strings.TrimPrefix(msg, "gate ")
	tidS, back := strings.CutSuffix(val, " back")
	if tid, err := strconv.Atoi(tidS); err == nil && len(fds) == 1 && len(*gates) < maxGates {
		*gates = append(*gates, pendingGate{fd: fds[0], tid: tid, deadline: time.Now().Add(gateTimeout), back: back})
		return nil // kept open until the gate is passed
	}
	return fds
}

// handleRecord applies one registration record.
func handleRecord(rec string, cgs map[string]bool, pgs map[int]bool, host int) {
	op, val, _ := strings.Cut(rec, " ")
	switch op {
	case "+cg":
		if filepath.IsAbs(val) && len(cgs) < maxWatchEntries {
			cgs[filepath.Clean(val)] = true
		}
	case "-cg":
		delete(cgs, filepath.Clean(val))
	case "+pg", "-pg":
		n, err := strconv.Atoi(val)
		if err != nil || n <= 1 || n == host {
			break
		}
		if op == "+pg" && len(pgs) < maxWatchEntries {
			pgs[n] = true
		} else {
			delete(pgs, n)
		}
	}
}

// serveGates answers the notifications poll reported on the gates (ready[i] belongs to
// gates[i]) and returns the gates still open. A gate closes once its thread's clone3 has
// been let through, when its filter has no user left (the launch failed before its fork),
// on an error, or at its deadline; closing the listener makes the kernel answer any later
// clone3 under that filter with ENOSYS.
func serveGates(gates []pendingGate, ready []unix.PollFd) []pendingGate {
	now := time.Now()
	open := gates[:0]
	for i, g := range gates {
		done := false
		switch re := ready[i].Revents; {
		case re&unix.POLLIN != 0:
			passed, err := kernel.AnswerClone3Ready(g.fd, g.tid)
			done = passed || err != nil
			if passed && g.back {
				// The host's guard reads it (best effort: a host that cannot take it
				// records no refusal of this run, which the kernel still refuses).
				_ = unix.Sendmsg(0, []byte("listener "+strconv.Itoa(g.tid)), unix.UnixRights(g.fd), nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
			}
		case re&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
			done = true
		}
		if !done && !now.Before(g.deadline) {
			done = true
		}
		if done {
			unix.Close(g.fd)
			continue
		}
		open = append(open, g)
	}
	return open
}

func killRegistered(cgs map[string]bool, pgs map[int]bool, host int) {
	self := os.Getpid()
	deadline := time.Now().Add(watchKillFor)
	for len(cgs)+len(pgs) > 0 && time.Now().Before(deadline) {
		for pg := range pgs {
			if syscall.Kill(-pg, syscall.SIGKILL) != nil {
				delete(pgs, pg) // ESRCH: the group is empty
			}
		}
		for dir := range cgs {
			// cgroup v2 (5.14+) kills the whole group in one write, forks included.
			_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
			data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				delete(cgs, dir) // removed already: nothing left in it
				continue
			}
			live := 0
			for _, f := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(f)
				if err != nil || pid <= 1 || pid == host || pid == self {
					continue
				}
				live++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if live == 0 && syscall.Rmdir(dir) == nil {
				delete(cgs, dir)
			} else if live == 0 {
				// Killed processes leave the group once reaped; v1 freezer groups may
				// need a thaw to let them die.
				_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
			}
		}
		if len(cgs)+len(pgs) > 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
}
