// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// Kernel refusals as records (sandbox.Spec.KernelDenials): the launch installs its filter
// with kernel.Filter.Notify (and Trace), the listener comes to the host (from the forked
// child or the stub over a socket pair, or in the session launcher's answer), and
// a kernel.NotifyServer answers the run's refused calls and reports them, rate-limited by
// a sandbox.DenialLog, until the run's tree is gone.

// listenerWait bounds how long the host waits for a run's listener after the launch; a
// listener that comes later is closed (the run's refused calls then get ENOSYS, still
// refused, unrecorded).
const listenerWait = 30 * time.Second

// notifyStopBound bounds how long Wait waits for the server to answer the run's last
// calls once the tree is gone.
const notifyStopBound = time.Second

// runNotify is one run's listener on the host side.
type runNotify struct {
	ch     chan int      // the listener, once it reaches the host
	ready  chan struct{} // closed once the server runs or the hand-over failed
	srv    *kernel.NotifyServer
	log    *sandbox.DenialLog
	grants *kernel.Grants // nil: trace nothing
	// connectTCP: the loopback ports the run may connect to (pol.ConnectCheck), nil: all.
	connectTCP []uint16
	tcpOnly    bool          // pol.TCPOnly
	pair       [2]int        // socket pair of a thread or stub launch (-1: none)
	cancel     chan struct{} // closed when the launch failed
	// stubEnd owns pair[1] for a stub launch (its fd 8); closed once the stub started.
	stubEnd *os.File
	// llSeen/llStop: the run's Landlock denials from the kernel's audit (nil: none).
	llSeen func() int64
	llStop func()
	// late is the spec's KernelDenialsLate (nil: finish waits for the Landlock records).
	late func(<-chan struct{})
}

// newRunNotify prepares spec's recording for pol (nil when spec asks for none or this
// kernel has no user notification).
func newRunNotify(spec *sandbox.Spec, pol *stub.Policy) *runNotify {
	if (spec.KernelDenials == nil && !pol.ConnectCheck) || !kernel.NotifySupported() {
		return nil
	}
	rn := &runNotify{ch: make(chan int, 1), ready: make(chan struct{}), pair: [2]int{-1, -1}, cancel: make(chan struct{})}
	trace := spec.Trace
	rn.log = sandbox.NewDenialLog(spec.KernelDenials)
	rn.late = spec.KernelDenialsLate
	rn.tcpOnly = pol.TCPOnly
	if pol.ConnectCheck && pol.Landlock != nil {
		rn.connectTCP = append([]uint16{}, pol.Landlock.ConnectTCP...)
	}
	if trace && pol.Landlock != nil {
		rn.grants = &kernel.Grants{ReadWrite: pol.Landlock.ReadWrite, ReadOnly: pol.Landlock.ReadOnly,
			ReadExec: pol.Landlock.ReadExec, Network: spec.Network}
	}
	return rn
}

// prepareStub points a stub launch at rn: the stub sends its listener over a socket pair
// whose other end becomes its fd 8.
func (rn *runNotify) prepareStub(pol *stub.Policy, l *stub.Launch, trace bool) error {
	if err := rn.prepare(nil, false, trace); err != nil {
		return err
	}
	pol.Notify, pol.Trace = true, trace
	rn.stubEnd = os.NewFile(uintptr(rn.pair[1]), "notify")
	l.Notify = rn.stubEnd
	return nil
}

// prepare points a thread launch at rn (tl nil: a stub launch, or inAnswer): over a
// socket pair, or (inAnswer) straight into rn.ch, which the session launcher's answer fills.
func (rn *runNotify) prepare(tl *threadLaunch, inAnswer bool, trace bool) error {
	if tl != nil {
		tl.notify, tl.trace = true, trace
	}
	// Served as soon as it arrives, while the launch is still under way: the launch
	// thread's own calls after its filter (traced ones) wait on the listener too.
	go func() {
		defer close(rn.ready)
		select {
		case fd := <-rn.ch:
			rn.srv = kernel.ServeNotifyWith(fd, kernel.NotifyConfig{Grants: rn.grants, TCPOnly: rn.tcpOnly, ConnectTCP: rn.connectTCP}, rn.add)
		case <-rn.cancel:
		case <-time.After(listenerWait):
		}
	}()
	if inAnswer {
		return nil
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// The receiver reads through a descriptor of its own, which it closes: finish and
	// abort close pair[0] (after a shutdown that ends the receiver's wait), and a number
	// closed under a receiver not yet scheduled could be a later run's socket by the time it
	// reads (that run's listener taken, its refusal records waited for 30 s).
	r, err := unix.FcntlInt(uintptr(fds[0]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return err
	}
	rn.pair = [2]int{fds[0], fds[1]}
	if tl != nil {
		tl.listenerTo = fds[1]
	}
	// Received at once, in parallel with the launch: the launch thread's own calls after
	// its filter (traced ones) wait on the listener, so it must be served before the
	// launch returns.
	go func(r int) {
		defer unix.Close(r)
		buf := make([]byte, 1)
		oob := make([]byte, unix.CmsgSpace(4))
		for {
			_, oobn, _, _, err := unix.Recvmsg(r, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err == unix.EINTR {
				continue
			}
			if err != nil || oobn == 0 {
				return // EOF: the launch thread is gone without handing one over
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil || len(msgs) == 0 {
				return
			}
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) > 0 {
				for _, f := range fds[1:] {
					unix.Close(f)
				}
				rn.ch <- fds[0]
			}
			return
		}
	}(r)
	return nil
}

// watchLandlock makes the Landlock denials the kernel's audit logs for this run reports
// of kind "landlock": the launch thread (or stub) is named before it restricts itself, and
// the domain logged under that name is the run's. Nothing when this process cannot read
// the kernel's audit or the kernel does not log denials after exec (ABI below 7).
func (rn *runNotify) watchLandlock(pol *stub.Policy) {
	if pol.Landlock == nil || !pol.Landlock.LogExec || min(pol.Landlock.ABI, kernel.MaxLandlockABI) < 7 {
		return
	}
	name := kernel.LandlockAuditName()
	seen, stop, ok := kernel.WatchLandlock(name, func(d kernel.LandlockDenial) {
		rn.log.Add(sandbox.KernelDenial{Kind: "landlock", Path: d.Path, Access: d.Blockers, Object: d.Object})
	})
	if !ok {
		return
	}
	pol.AuditName, rn.llSeen, rn.llStop = name, seen, stop
}

// The end of a run waits for its last Landlock records: the kernel queues them before the
// run's processes exit and its audit thread delivers them asynchronously. Where fledge
// can ask the kernel (AUDIT_GET), it waits until the queue is empty (backlog 0) and
// landlockDrain more for the reader to take what was just sent; where it cannot (a pid
// namespace of its own), until none came for landlockQuiet. Never longer than
// landlockSettle; not at all when the audit is off.
const (
	landlockSettle = 250 * time.Millisecond
	landlockQuiet  = 25 * time.Millisecond
	landlockDrain  = 2 * time.Millisecond
)

// auditStatusRefused: the kernel refuses this process AUDIT_GET (it runs in a pid
// namespace of its own), which does not change while it runs: not asked again.
var auditStatusRefused atomic.Bool

var errAuditStatusRefused = errors.New("kernel audit status refused to this process")

// stopLandlock ends the run's Landlock watch once its last records had a chance to arrive.
func (rn *runNotify) stopLandlock() {
	if rn.llStop == nil {
		return
	}
	defer func() { rn.llStop(); rn.llStop = nil }()
	start := time.Now()
	last, quietSince := rn.llSeen(), start
	for time.Since(start) < landlockSettle {
		on, backlog, err := false, uint32(0), errAuditStatusRefused
		if !auditStatusRefused.Load() {
			on, backlog, err = kernel.KernelAuditStatus()
			if errors.Is(err, unix.EPERM) {
				// A pid namespace of our own: refused now, refused for good.
				auditStatusRefused.Store(true)
			}
		}
		switch {
		case err == nil && !on:
			return // nothing flows
		case err == nil && backlog == 0:
			time.Sleep(landlockDrain)
			n := rn.llSeen()
			if n == last {
				return
			}
			last = n
			continue
		case err == nil:
			time.Sleep(landlockDrain) // the queue is still being sent
			continue
		}
		time.Sleep(landlockDrain)
		if n := rn.llSeen(); n != last {
			last, quietSince = n, time.Now()
		} else if time.Since(quietSince) >= landlockQuiet {
			return
		}
	}
}

// launched is called once the launch succeeded. The host's end of the pair is closed: the
// launch thread's copy dies with the thread, so a receiver still waiting sees EOF.
func (rn *runNotify) launched() {
	if rn.stubEnd != nil {
		rn.stubEnd.Close()
		rn.stubEnd, rn.pair[1] = nil, -1
	}
	if rn.pair[1] >= 0 {
		unix.Close(rn.pair[1])
		rn.pair[1] = -1
	}
}

// abort releases what a failed launch prepared.
func (rn *runNotify) abort() {
	if rn.stubEnd != nil {
		rn.stubEnd.Close()
		rn.stubEnd, rn.pair[1] = nil, -1
	}
	for i, fd := range rn.pair {
		if fd >= 0 {
			if i == 0 {
				_ = unix.Shutdown(fd, unix.SHUT_RDWR) // the receiver's own descriptor reads EOF
			}
			unix.Close(fd)
			rn.pair[i] = -1
		}
	}
	close(rn.cancel)
	<-rn.ready
	if rn.llStop != nil {
		rn.llStop()
		rn.llStop = nil
	}
	if rn.srv != nil {
		rn.srv.Stop(notifyStopBound) // the failed launch's thread is gone or going
	}
	select {
	case fd := <-rn.ch:
		unix.Close(fd)
	default:
	}
}

// add turns a listener's notice into the run's report.
func (rn *runNotify) add(n kernel.Notice) {
	d := sandbox.KernelDenial{Syscall: n.Syscall, Errno: n.Errno, When: n.When, Path: n.Path,
		Access: n.Access, Address: n.Address, Object: n.Object, Pid: n.Pid}
	switch {
	case n.Denied:
		d.Kind = "syscall"
	case n.Address != "":
		d.Kind, d.Traced = "network", true
	default:
		d.Kind, d.Traced = "path", true
	}
	rn.log.Add(d)
}

// finish runs once the run's tree is gone: the last calls are answered, the listener
// closed, and the true counts reported.
func (rn *runNotify) finish() {
	if rn.pair[0] >= 0 {
		_ = unix.Shutdown(rn.pair[0], unix.SHUT_RDWR) // the receiver's own descriptor reads EOF
		unix.Close(rn.pair[0])
		rn.pair[0] = -1
	}
	<-rn.ready
	if rn.srv != nil {
		rn.srv.Stop(notifyStopBound)
	}
	if rn.llStop != nil && rn.late != nil {
		// The Landlock records still on their way are reported when they come, off the
		// run's Result: the caller was told to wait for settled instead.
		settled := make(chan struct{})
		rn.late(settled)
		go func() {
			defer close(settled)
			rn.stopLandlock()
			rn.log.Flush()
		}()
		return
	}
	rn.stopLandlock()
	rn.log.Flush()
}

// kernelRefusals is Report.KernelRefusals: both launchers hand the listener to the host.
func kernelRefusals(launch string) string {
	if kernel.NotifySupported() {
		return "seccomp-notify"
	}
	return "none"
}

// landlockAudit is Report.LandlockAudit.
func landlockAudit(abi int) string {
	if abi < 7 {
		return "none"
	}
	on, err := kernel.KernelAuditEnabled()
	switch {
	case err != nil:
		return "unknown"
	case on && kernel.NotifySupported() && kernel.AuditReadCapable():
		return "recorded"
	case on:
		return "kernel-audit"
	}
	return "off"
}
