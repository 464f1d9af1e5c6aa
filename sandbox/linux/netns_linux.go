// SPDX-License-Identifier: MIT

package linux

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Network namespaces made ahead. A run without network is born in a network namespace of
// its own, which has nothing but a loopback device that is down. Making one
// (unshare(CLONE_NEWNET)) is about a third of a millisecond of the kernel's per-namespace
// setup; on the launch thread it was the largest single step of a plugin's start. The
// thread launcher takes one made ahead instead, and its launch thread enters it with setns
// (a few microseconds). The next one is made once the run that took the last one has
// ended: right after the launch it would compete for the CPU with the program's own start
// (a plugin's Go runtime start was slowed by about as much as the launch gained).
//
// Nothing is shared by this: every namespace is made by a thread that is discarded right
// after (onDiscardedThread), its one handle is an fd of this pool, and take hands each fd
// out once; the launch that took it closes it after the fork. So the namespace a run enters
// was never entered by any process before it, as if its launch thread had made it: it is no
// cache of anything a run did, and carries no policy that could be another run's.
type netNamespaces struct {
	mu     sync.Mutex
	cond   *sync.Cond // signalled when a namespace is ready or the making stops
	ready  []int      // fds of namespaces no process was ever in
	making bool
	// wanted: a launch asked for a namespace since the making last began.
	wanted bool
	// made and taken count namespaces (tests: the path is taken).
	made, taken atomic.Int64
	// makeForTest replaces makeNetNS (tests break the pool on purpose).
	makeForTest func() (int, error)
}

// netNSAhead is how many namespaces wait ready: two, so a second run that starts while the
// first still runs (a plugin and its command, commands in parallel) finds one too.
const netNSAhead = 2

// aheadNetNS is the process's pool: any two fresh namespaces are alike, so every Sandbox of
// the process draws from the same one.
var aheadNetNS = newNetNamespaces()

func newNetNamespaces() *netNamespaces {
	n := &netNamespaces{}
	n.cond = sync.NewCond(&n.mu)
	return n
}

// take returns the fd of a namespace no process was ever in, which the caller owns (and
// closes after its launch), or -1: the launch then unshares its own, as without the pool.
// While namespaces are being made, it waits for the next (ready sooner than one made from
// the start).
func (n *netNamespaces) take() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wanted = true
	for len(n.ready) == 0 && n.making {
		n.cond.Wait()
	}
	k := len(n.ready)
	if k == 0 {
		return -1
	}
	fd := n.ready[k-1]
	n.ready = n.ready[:k-1]
	n.taken.Add(1)
	return fd
}

// isWanted: a launch asked for a namespace since the making last began.
func (n *netNamespaces) isWanted() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.wanted
}

// afterRun makes namespaces in the background up to netNSAhead, once a launch took one (or
// found none): called when that run has ended, so the making competes neither with its
// launch nor with its program's start.
func (n *netNamespaces) afterRun() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.wanted || n.making || len(n.ready) >= netNSAhead {
		return
	}
	n.wanted, n.making = false, true
	mk := makeNetNS
	if n.makeForTest != nil {
		mk = n.makeForTest
	}
	go func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		defer n.cond.Broadcast()
		for len(n.ready) < netNSAhead {
			n.mu.Unlock()
			fd, err := mk()
			n.mu.Lock()
			if err != nil {
				break // the launches unshare their own
			}
			n.ready = append(n.ready, fd)
			n.made.Add(1)
			n.cond.Broadcast()
		}
		n.making = false
	}()
}

// probe is the sandbox's network-namespace probe (canUnshareNet): it makes a namespace as
// makeNetNS does (on a thread discarded right after; never the main thread, which would
// stay in it) and, instead of letting it go, keeps it as one made ahead while the pool has
// room. A process's first run without network then enters the probe's namespace rather
// than making another: each costs about half a millisecond to make and as much again for
// the kernel to tear down. No process was ever in it, as with every namespace of the pool.
func (n *netNamespaces) probe() bool {
	n.mu.Lock()
	mk := n.makeForTest
	n.mu.Unlock()
	ok, fd := false, -1
	if mk != nil {
		var err error
		fd, err = mk()
		ok = err == nil
	} else {
		onDiscardedThread(func() {
			if ok = unix.Unshare(unix.CLONE_NEWNET) == nil; ok {
				fd, _ = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			}
		})
	}
	if fd < 0 {
		return ok // the answer stands; there is just no namespace to keep
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.ready) >= netNSAhead {
		unix.Close(fd)
		return true
	}
	n.ready = append(n.ready, fd)
	n.made.Add(1)
	n.cond.Broadcast()
	return true
}

// drain closes the namespaces waiting, once none is being made (tests; the process's pool
// otherwise lives as long as the process).
func (n *netNamespaces) drain() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.making {
		n.cond.Wait()
	}
	for _, fd := range n.ready {
		unix.Close(fd)
	}
	n.ready, n.wanted = nil, false
}

// makeNetNS makes an empty network namespace on a thread that is discarded right after, and
// returns the only handle to it.
func makeNetNS() (int, error) {
	fd := -1
	var err error
	onDiscardedThread(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return
		}
		fd, err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	return fd, err
}
