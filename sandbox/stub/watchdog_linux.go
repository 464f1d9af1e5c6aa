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

// runWatchdog is the watchdog's whole life; it returns the exit code.
func runWatchdog(args []string) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE)
	host, err := strconv.Atoi(args[2])
	if err != nil || host <= 1 {
		return 2
	}
	cgs := map[string]bool{}
	pgs := map[int]bool{}
	buf := make([]byte, maxWatchLine)
	for {
		// A plain read: the host sends no fds, and any a message carried are discarded
		// (closed) by the kernel with its control data.
		n, err := unix.Read(0, buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			// A socket someone made non-blocking: wait for the next message, not spin.
			_, _ = unix.Poll([]unix.PollFd{{Fd: 0, Events: unix.POLLIN}}, -1)
			continue
		}
		if err != nil || n == 0 {
			break // EOF: the host is gone or done
		}
		// One or more registration records, NUL-separated (no path holds a NUL).
		for _, rec := range strings.Split(string(buf[:n]), "\x00") {
			handleRecord(rec, cgs, pgs, host)
		}
	}
	killRegistered(cgs, pgs, host)
	return 0
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
