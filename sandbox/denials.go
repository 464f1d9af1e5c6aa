// SPDX-License-Identifier: MIT

package sandbox

import (
	"sync"
)

// KernelDenial is one refusal the kernel made a run (or, in trace mode, an access it
// tried outside its grants), as the sandbox reports it.
type KernelDenial struct {
	// Kind: "syscall" (a call on the seccomp deny-list), "path" (a filesystem path
	// outside the grants), "network" (a destination the run may not reach) or "landlock"
	// (a denial Landlock made and the kernel's audit logged: Access holds its blockers).
	Kind    string `json:"kind"`
	Syscall string `json:"syscall"`
	Errno   string `json:"errno,omitempty"`
	When    string `json:"when,omitempty"` // the deny-list row's condition
	Path    string `json:"path,omitempty"`
	Access  string `json:"access,omitempty"` // read | write | exec | stat | connect
	Address string `json:"address,omitempty"`
	// Object is the rest of what a Landlock record names of the object (dev=, ino=, a
	// port), as the kernel logged it; for a refused socket or socketpair call, what it asked
	// for ("family=AF_VSOCK type=SOCK_STREAM protocol=0"). Not part of Key: a run's
	// refused families are one kind, and its record names the first.
	Object string `json:"object,omitempty"`
	Pid    int    `json:"pid,omitempty"` // the caller, as the host sees it
	// Traced: seen by trace mode (Spec.Trace), which observes and never decides.
	Traced bool `json:"traced,omitempty"`
	// Count is how many times it happened: 1 on the first report, the true total on the
	// final one (Final).
	Count int64 `json:"count"`
	Final bool  `json:"final,omitempty"`
}

// Key is what repeats of one refusal share (the pid does not count: a loop of forks is
// one refusal repeated).
func (d KernelDenial) Key() string {
	return d.Kind + "\x00" + d.Syscall + "\x00" + d.Errno + "\x00" + d.Path + "\x00" + d.Access + "\x00" + d.Address
}

// MaxDenialKinds bounds the distinct refusals one run reports one by one; past it every
// new kind is only counted, in one overflow entry.
const MaxDenialKinds = 256

// DenialLog rate-limits a run's refusals: the first of each kind is passed on at once,
// repeats are counted, and Flush passes the true count of every kind that repeated. A
// loop of 100,000 refused calls is two reports. At most 2*MaxDenialKinds+2 reports per
// run, whatever it does.
type DenialLog struct {
	mu       sync.Mutex
	on       func(KernelDenial)
	seen     map[string]*KernelDenial
	overflow *KernelDenial
	flushed  bool
}

// NewDenialLog passes reports to on (nil: a log that drops everything).
func NewDenialLog(on func(KernelDenial)) *DenialLog {
	return &DenialLog{on: on, seen: map[string]*KernelDenial{}}
}

// Add counts d and passes it on when it is the first of its kind.
func (l *DenialLog) Add(d KernelDenial) {
	if l == nil || l.on == nil {
		return
	}
	l.mu.Lock()
	if l.flushed {
		l.mu.Unlock()
		return
	}
	if e, ok := l.seen[d.Key()]; ok {
		e.Count++
		l.mu.Unlock()
		return
	}
	if len(l.seen) >= MaxDenialKinds {
		first := l.overflow == nil
		if first {
			l.overflow = &KernelDenial{Kind: "overflow", Syscall: "*", Traced: d.Traced}
		}
		l.overflow.Count++
		l.mu.Unlock()
		if first {
			l.on(KernelDenial{Kind: "overflow", Syscall: "*", Traced: d.Traced, Count: 1})
		}
		return
	}
	d.Count, d.Final = 1, false
	cp := d
	l.seen[d.Key()] = &cp
	l.mu.Unlock()
	l.on(d)
}

// Flush passes the final count of every kind seen more than once; later Adds are
// dropped. The run has ended, so no kind can grow any more.
func (l *DenialLog) Flush() {
	if l == nil || l.on == nil {
		return
	}
	l.mu.Lock()
	if l.flushed {
		l.mu.Unlock()
		return
	}
	l.flushed = true
	var out []KernelDenial
	for _, e := range l.seen {
		if e.Count > 1 {
			f := *e
			f.Final = true
			out = append(out, f)
		}
	}
	if l.overflow != nil && l.overflow.Count > 1 {
		f := *l.overflow
		f.Final = true
		out = append(out, f)
	}
	l.mu.Unlock()
	for _, d := range out {
		l.on(d)
	}
}
