// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/stub"
)

// guard is the host side of the host-death watchdog (see sandbox/stub/watchdog_linux.go):
// it starts the watchdog on first use and registers every running tree's cgroups (or
// process group) with it before the tree starts, so a host killed by any signal leaves
// nothing running.
type guard struct {
	mu     sync.Mutex
	exe    string
	fd     int // host end of the SOCK_SEQPACKET socket (-1: not started)
	proc   *os.Process
	exited chan struct{}
	regs   map[string]bool // "+cg DIR" / "+pg N" records currently registered
	closed bool            // close was called: ensure starts nothing any more
}

// errNoWatchdog: this executable cannot be re-executed as the watchdog.
var errNoWatchdog = errors.New("no host-death watchdog: the executable's main does not call stub.MaybeRun")

// guardCloseBound bounds how long Close waits for the watchdog to exit.
const guardCloseBound = 10 * time.Second

func newGuard(stubPath string) *guard {
	g := &guard{exe: stubPath, fd: -1, regs: map[string]bool{}}
	if g.exe == "" && stub.MaybeRunCalled() {
		if p, err := os.Executable(); err == nil {
			g.exe = p
		}
	}
	return g
}

// available says whether a watchdog can be started here.
func (g *guard) available() bool { return g.exe != "" }

// startLocked starts the watchdog and replays the current registrations.
func (g *guard) startLocked() error {
	if g.exe == "" {
		return errNoWatchdog
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("watchdog socket: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "watchdog")
	defer child.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("watchdog: %w", err)
	}
	defer null.Close()
	proc, err := os.StartProcess(g.exe, []string{g.exe, stub.WatchdogMarker, strconv.Itoa(os.Getpid())}, &os.ProcAttr{
		Files: []*os.File{child, null, null},
		Env:   []string{},
		// Its own session: a terminal's ^C or hangup reaches fledge, not the watchdog.
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("start watchdog: %w", err)
	}
	g.fd, g.proc, g.exited = fds[0], proc, make(chan struct{})
	go func(p *os.Process, done chan struct{}) { _, _ = p.Wait(); close(done) }(proc, g.exited)
	recs := make([]string, 0, len(g.regs))
	for rec := range g.regs {
		recs = append(recs, rec)
	}
	return g.sendRecords(recs)
}

// sendRecords sends registration records, as few messages as fit in the watchdog's bound
// (NUL-separated): each message wakes the watchdog process.
func (g *guard) sendRecords(recs []string) error {
	var msg []byte
	flush := func() error {
		if len(msg) == 0 {
			return nil
		}
		err := g.send(string(msg), nil)
		msg = msg[:0]
		return err
	}
	for _, rec := range recs {
		if len(msg) > 0 && len(msg)+1+len(rec) > stub.WatchdogMaxMessage {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(msg) > 0 {
			msg = append(msg, 0)
		}
		msg = append(msg, rec...)
	}
	return flush()
}

// send writes one record (MSG_NOSIGNAL: a dead watchdog is an error, not a SIGPIPE).
func (g *guard) send(rec string, rights []byte) error {
	if err := unix.Sendmsg(g.fd, []byte(rec), rights, nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	return nil
}

// add registers items ("+cg DIR", "+pg N") before the tree they name starts, starting the
// watchdog if needed. A watchdog that died is replaced once.
//
// An item already registered is not sent again (a spare's groups, registered when the
// spare was made, are added once more by the run that takes them): every message wakes the
// watchdog process, a context switch each on the exec's path. The watchdog knows every
// registered item while it runs: a failed send deletes what it added, and a new watchdog
// is given them all (startLocked).
func (g *guard) add(items ...string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	fresh := make([]string, 0, len(items))
	for _, it := range items {
		if !g.regs[it] {
			fresh = append(fresh, it)
		}
	}
	if len(fresh) == 0 {
		if g.aliveLocked() {
			return nil
		}
		if g.fd >= 0 {
			// Dead since: a new one, given every registration.
			closeGuardFD(g.fd)
			g.fd = -1
		}
		err := g.startLocked()
		if err != nil {
			// As for a failed send below: the caller does not count them as registered.
			for _, it := range items {
				delete(g.regs, it)
			}
		}
		return err
	}
	for _, it := range fresh {
		g.regs[it] = true
	}
	err := g.sendLocked(fresh)
	if err != nil {
		for _, it := range fresh {
			delete(g.regs, it)
		}
	}
	return err
}

// ensure starts the watchdog ahead of the first registration (Sandbox.Prepare), unless it
// runs already or the sandbox is closed.
func (g *guard) ensure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.aliveLocked() {
		return nil
	}
	if g.fd >= 0 {
		closeGuardFD(g.fd)
		g.fd = -1
	}
	return g.startLocked()
}

// aliveLocked reports whether the watchdog runs (a dead one is replaced by the next send).
func (g *guard) aliveLocked() bool {
	if g.fd < 0 {
		return false
	}
	select {
	case <-g.exited:
		return false
	default:
		return true
	}
}

func (g *guard) sendLocked(items []string) error {
	if g.fd < 0 {
		return g.startLocked() // replays regs, items included
	}
	if err := g.sendRecords(items); err != nil {
		// The watchdog is gone (killed by someone): start a new one.
		closeGuardFD(g.fd)
		g.fd = -1
		return g.startLocked()
	}
	return nil
}

// closeGuardFD shuts the host's end down, so the watchdog reads EOF at once even while a
// copy of it is still open elsewhere (a child between its fork and its exec), and closes it.
func closeGuardFD(fd int) {
	_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	unix.Close(fd)
}

// remove unregisters items once their tree is gone (best effort).
func (g *guard) remove(items ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var recs []string
	for _, it := range items {
		if g.regs[it] {
			delete(g.regs, it)
			recs = append(recs, "-"+it[1:])
		}
	}
	if g.fd >= 0 && len(recs) > 0 {
		_ = g.sendRecords(recs)
	}
}

// close ends the watchdog (it kills whatever is still registered, normally nothing) and
// reaps it.
func (g *guard) close() error {
	g.mu.Lock()
	fd, exited := g.fd, g.exited
	g.fd, g.closed = -1, true
	g.mu.Unlock()
	if fd < 0 {
		return nil
	}
	closeGuardFD(fd)
	select {
	case <-exited:
		return nil
	case <-time.After(guardCloseBound):
		return fmt.Errorf("watchdog did not exit within %v", guardCloseBound)
	}
}

// guardItems are the watchdog records for a run's groups.
func (rc *runCgroup) guardItems() []string {
	var out []string
	if rc.unified != "" {
		out = append(out, "+cg "+rc.unified)
	}
	for _, d := range rc.v1 {
		out = append(out, "+cg "+d)
	}
	return out
}
