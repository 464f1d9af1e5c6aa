// SPDX-License-Identifier: MIT

package sandbox

import "os"

// ProcessBase is the part of a Process every backend shares: the main process, the two
// moments of its end (the main process reaped; the whole tree gone and the Result set) and
// Pid, Signal and Wait. A backend embeds it and adds Kill, which differs per OS (cgroup.kill,
// a process-group sweep, a tree walk).
type ProcessBase struct {
	proc   *os.Process
	exited chan struct{}
	done   chan struct{}
	res    *Result
	err    error
}

// NewProcessBase starts tracking p.
func NewProcessBase(p *os.Process) ProcessBase {
	return ProcessBase{proc: p, exited: make(chan struct{}), done: make(chan struct{})}
}

// Pid of the main process.
func (b *ProcessBase) Pid() int { return b.proc.Pid }

// OSProcess is the main process.
func (b *ProcessBase) OSProcess() *os.Process { return b.proc }

// Signal sends sig to the main process; os.ErrProcessDone once it was reaped (its pid may
// belong to someone else by then).
func (b *ProcessBase) Signal(sig os.Signal) error {
	select {
	case <-b.exited:
		return os.ErrProcessDone
	default:
	}
	return b.proc.Signal(sig)
}

// Wait returns the Result once the whole tree is gone.
func (b *ProcessBase) Wait() (*Result, error) {
	<-b.done
	return b.res, b.err
}

// Exited is closed once the main process was reaped.
func (b *ProcessBase) Exited() <-chan struct{} { return b.exited }

// MarkExited says the main process was reaped (once).
func (b *ProcessBase) MarkExited() { close(b.exited) }

// Done is closed once the tree is gone and the Result is set.
func (b *ProcessBase) Done() <-chan struct{} { return b.done }

// Finish publishes the Result (once); Wait returns it from then on.
func (b *ProcessBase) Finish(res *Result, err error) {
	b.res, b.err = res, err
	close(b.done)
}
