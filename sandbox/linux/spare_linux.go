// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

// A spare is the next run's cgroups with a launch thread already inside them. On hybrid
// and v1 systems the launch thread must join the run's v1 groups (memory, pids) before it
// forks, so every process of the command is born limited; that move takes the kernel's
// cgroup threadgroup lock for writing, which waits for an RCU grace period — about a
// quarter of a millisecond here, a fifth of a sandboxed `true`. Made in the background
// right after a launch, the spare takes that wait off the next exec's critical path. A
// spare is used only for a spec with the same name and limits it was made for.
type spare struct {
	rc       *runCgroup
	degraded []string
	name     string
	limits   sandbox.Limits
	jobs     chan *threadLaunch // one launch, or nil to release the thread
	results  chan launchResult
	released chan struct{} // closed once a released thread has left the groups
	// exit is a pidfd of the parked thread (threadexit_linux.go; nil: none). With it the
	// thread never goes back to the host: it drops its bounding capabilities ahead of the
	// run (off the exec's path), and a released spare's thread exits in its groups.
	exit *os.File
	// ipc: the thread is in an IPC namespace of its own already (made with the spare,
	// for the one run it launches), so the launch does not make one.
	ipc bool
	// capsDropped: the thread's bounding set is empty already.
	capsDropped bool
	// bare: the groups only, without a thread of fledge's (for a session whose runs go
	// through its launcher); park is a thread of that launcher already in them (nil: the
	// run's child joins them itself).
	bare bool
	park *launcherPark
}

type launchResult struct {
	pid int
	err error
}

type spares struct {
	mu      sync.Mutex
	ready   *spare
	making  bool
	closed  bool
	pending sync.WaitGroup
	hits    atomic.Int64 // runs launched from a spare (tests check the path is taken)
	first   *firstSpare  // the spare Prepare is making for a session's first run (prepare_linux.go)
}

func sameLimits(a, b sandbox.Limits) bool {
	return a.MemoryBytes == b.MemoryBytes && a.Pids == b.Pids && a.CPU == b.CPU
}

// takeSpare returns the ready spare if it fits spec (nil otherwise). The next one is made
// once this run has launched (spareAfterLaunch), so making it does not compete with the
// launch and its audit fsync for the CPU.
// bare asks for groups without a thread (the session has a launcher).
func (s *Sandbox) takeSpare(spec *sandbox.Spec, bare bool) *spare {
	if s.launch != LaunchThread || len(s.cg.v1) == 0 {
		return nil // only the thread launcher joins v1 groups
	}
	s.awaitFirstSpare(spec)
	s.spares.mu.Lock()
	sp := s.spares.ready
	s.spares.ready = nil
	s.spares.mu.Unlock()
	if sp != nil && (sp.name != spec.Name || !sameLimits(sp.limits, spec.Limits) || sp.bare != bare) {
		// Releasing it waits for a cgroup migration; do that off this run's path.
		old := sp
		s.spares.pending.Add(1)
		go func() {
			defer s.spares.pending.Done()
			s.disposeSpare(old, true)
		}()
		sp = nil
	}
	if sp != nil {
		s.spares.hits.Add(1)
	}
	return sp
}

// makeSpare prepares a spare in the background (at most one at a time).
func (s *Sandbox) makeSpare(name string, limits sandbox.Limits, bare, hostNet bool) {
	s.spares.mu.Lock()
	if s.spares.making || s.spares.closed || s.spares.ready != nil {
		s.spares.mu.Unlock()
		return
	}
	s.spares.making = true
	s.spares.pending.Add(1)
	s.spares.mu.Unlock()
	go func() {
		defer s.spares.pending.Done()
		sp := s.newSpare(name, limits, bare, hostNet)
		s.spares.mu.Lock()
		s.spares.making = false
		if sp != nil && !s.spares.closed && s.spares.ready == nil {
			s.spares.ready, sp = sp, nil
		}
		s.spares.mu.Unlock()
		if sp != nil {
			s.disposeSpare(sp, true)
		}
	}()
}

func (s *Sandbox) newSpare(name string, limits sandbox.Limits, bare, hostNet bool) *spare {
	lim := limits
	rc, degraded, err := newRunCgroup(s.cg, name, &lim)
	if err != nil {
		return nil
	}
	// A killed host must not leave the spare's groups behind either (best effort: a
	// spare is an optimisation).
	_ = s.guard.add(rc.guardItems()...)
	if bare {
		return &spare{rc: rc, degraded: degraded, name: name, limits: limits, bare: true,
			park: s.parkIn(name, hostNet, rc)}
	}
	sp := &spare{rc: rc, degraded: degraded, name: name, limits: limits,
		jobs: make(chan *threadLaunch), results: make(chan launchResult, 1), released: make(chan struct{})}
	joined := make(chan error, 1)
	var park func()
	park = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Never the main thread (see threadLaunch.start).
			defer runtime.UnlockOSThread()
			done := make(chan struct{})
			go func() { park(); close(done) }()
			<-done
			return
		}
		tid := []byte(strconv.Itoa(unix.Gettid()))
		sp.exit = openThreadExit(s.leaveForTest)
		run, back := rc.v1Dirs()
		for _, d := range run {
			if err := os.WriteFile(d+"/tasks", tid, 0); err != nil {
				if sp.exit == nil {
					for _, b := range back {
						_ = os.WriteFile(b+"/tasks", tid, 0)
					}
					runtime.UnlockOSThread()
				}
				joined <- err
				return
			}
		}
		joined <- nil
		if sp.exit != nil {
			// After the spare is handed out as ready (a run that comes meanwhile waits
			// for this instead of making groups of its own). This thread dies whatever
			// comes (a launch or a release): what a run's launch thread must drop anyway
			// is dropped now. Best effort: the launch drops whatever is left.
			sp.capsDropped = kernel.DropBoundingCaps() == nil
			// The run's own IPC namespace (about 30 µs to make), unshared here where the
			// launch would have: on the launch thread, before the view.
			sp.ipc = s.ipcns && !s.userView && unix.Unshare(unix.CLONE_NEWIPC) == nil
		}
		tl := <-sp.jobs
		if tl == nil && sp.exit != nil {
			return // released unused: the thread exits (still locked), disposeSpare waits
		}
		if tl == nil {
			// Released unused: back to the host's groups, and the thread is clean again.
			for _, b := range back {
				_ = os.WriteFile(b+"/tasks", tid, 0)
			}
			runtime.UnlockOSThread()
			close(sp.released)
			return
		}
		// Never unlocked: the thread takes on the child's confinement and dies.
		tl.joined, tl.exit, tl.ipcDone, tl.capsDropped = true, sp.exit, sp.ipc, sp.capsDropped
		pid, err := tl.onThread()
		sp.results <- launchResult{pid, err}
		tl.finishLaunch()
	}
	go park()
	if err := <-joined; err != nil {
		if sp.exit != nil {
			threadGone(sp.exit, leaveWait)
			_ = sp.exit.Close()
		}
		s.guard.remove(rc.guardItems()...)
		_ = rc.remove()
		return nil
	}
	return sp
}

// disposeSpare releases the parked thread; removeGroups also removes its cgroups (false
// when a run already owns them).
func (s *Sandbox) disposeSpare(sp *spare, removeGroups bool) {
	sp.release()
	if removeGroups {
		s.guard.remove(sp.rc.guardItems()...)
		_ = sp.rc.remove()
	}
}

// release lets the parked thread go unused and waits until it is gone (or clean again).
func (sp *spare) release() {
	if sp.bare {
		if sp.park != nil {
			sp.park.release()
		}
		return
	}
	sp.jobs <- nil
	if sp.exit != nil {
		threadGone(sp.exit, leaveWait)
		_ = sp.exit.Close()
	} else {
		<-sp.released
	}
}

// closeSpares releases the ready spare and waits for one being made.
func (s *Sandbox) closeSpares() {
	s.spares.mu.Lock()
	s.spares.closed = true
	sp := s.spares.ready
	s.spares.ready = nil
	s.spares.mu.Unlock()
	if sp != nil {
		s.disposeSpare(sp, true)
	}
	s.spares.pending.Wait()
}

// spareAfterLaunch starts making the next run's spare (thread launcher with v1 groups only),
// and once p has ended, the next network namespaces (netns_linux.go).
//
// The spare is made right away even after a plugin's own launch, although making it then
// competes with the plugin's start (its v1 join takes the cgroup threadgroup lock that the
// plugin's thread creation waits on): the plugin's first command has the plugin's name and
// limits and is launched from it.
func (s *Sandbox) spareAfterLaunch(spec *sandbox.Spec, p *process) {
	if s.launch == LaunchThread && aheadNetNS.isWanted() {
		go func() {
			<-p.Done()
			aheadNetNS.afterRun()
		}()
	}
	if s.launch != LaunchThread || len(s.cg.v1) == 0 || !s.cg.writable() {
		return
	}
	s.makeSpare(spec.Name, spec.Limits, p.viaLauncher || s.launchers.has(spec.Name), spec.Network)
}
