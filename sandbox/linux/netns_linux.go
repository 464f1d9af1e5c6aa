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
// (a few microseconds). The next one is made after the launch, off its path.
//
// Nothing is shared by this: every namespace is made by a thread that is discarded right
// after (onDiscardedThread), its one handle is an fd of this pool, and take hands each fd
// out once; the launch that took it closes it after the fork. So the namespace a run enters
// was never entered by any process before it, as if its launch thread had made it: it is no
// cache of anything a run did, and carries no policy that could be another run's.
type netNamespaces struct {
	mu     sync.Mutex
	ready  []int         // fds of namespaces no process was ever in
	making chan struct{} // closed when the namespace being made is ready (nil: none)
	// wanted: a launch took one (or found none) since the last was made.
	wanted bool
	// made and taken count namespaces (tests: the path is taken).
	made, taken atomic.Int64
	// makeForTest replaces makeNetNS (tests break the pool on purpose).
	makeForTest func() (int, error)
}

// netNSAhead is how many namespaces wait ready.
const netNSAhead = 1

// aheadNetNS is the process's pool: any two fresh namespaces are alike, so every Sandbox of
// the process draws from the same one.
var aheadNetNS = &netNamespaces{}

// take returns the fd of a namespace no process was ever in, which the caller owns (and
// closes after its launch), or -1: the launch then unshares its own, as without the pool.
// A namespace being made is waited for (it is ready sooner than one made from the start).
func (n *netNamespaces) take() int {
	n.mu.Lock()
	n.wanted = true
	if len(n.ready) == 0 && n.making != nil {
		wait := n.making
		n.mu.Unlock()
		<-wait
		n.mu.Lock()
	}
	fd := -1
	if k := len(n.ready); k > 0 {
		fd = n.ready[k-1]
		n.ready = n.ready[:k-1]
		n.taken.Add(1)
	}
	n.mu.Unlock()
	return fd
}

// afterLaunch makes the next namespace in the background once a launch took one (or would
// have): called after a launch, so the making does not compete with it.
func (n *netNamespaces) afterLaunch() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.wanted || n.making != nil || len(n.ready) >= netNSAhead {
		return
	}
	n.wanted = false
	done := make(chan struct{})
	n.making = done
	go func() {
		defer close(done)
		mk := makeNetNS
		if n.makeForTest != nil {
			mk = n.makeForTest
		}
		fd, err := mk()
		n.mu.Lock()
		defer n.mu.Unlock()
		n.making = nil
		if err != nil {
			return // the launches unshare their own
		}
		n.ready = append(n.ready, fd)
		n.made.Add(1)
	}()
}

// drain closes the namespaces waiting and waits for one being made (tests; the process's
// pool otherwise lives as long as the process).
func (n *netNamespaces) drain() {
	n.mu.Lock()
	wait := n.making
	n.mu.Unlock()
	if wait != nil {
		<-wait
	}
	n.mu.Lock()
	defer n.mu.Unlock()
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
