// SPDX-License-Identifier: MIT

package core

import (
	"strings"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

// SetTrace turns trace mode on for every run of this session started after it.
func (r *Recorder) SetTrace(on bool) { r.trace.Store(on) }

// Tracing reports whether the session's runs are traced.
func (r *Recorder) Tracing() bool { return r.trace.Load() }

// ObserveKernel makes spec's kernel refusals records of this session (kernel_denied), with
// command (the exec's command line; "" for the plugin process itself), and traces the run
// when the session does. Every adapter calls it on the spec it is about to start.
func (r *Recorder) ObserveKernel(spec *sandbox.Spec, command string) {
	if r == nil {
		return
	}
	spec.Trace = r.Tracing()
	spec.KernelDenials = func(d sandbox.KernelDenial) { r.KernelDenied(d, command) }
	// The run's reply does not wait for Landlock's refusals to come through the kernel's
	// audit (up to a quarter of a second, at every exec): they are recorded when they
	// come, and the session's end (Close) or SettleKernel waits for them.
	spec.KernelDenialsLate = r.awaitLate
}

// kernelSettleBound bounds how long SettleKernel waits for the late refusals of every run
// still settling (each run's own wait is bounded by the sandbox; they settle in parallel).
const kernelSettleBound = time.Second

// awaitLate notes a run whose last kernel refusals are still on their way.
func (r *Recorder) awaitLate(settled <-chan struct{}) {
	r.lateMu.Lock()
	defer r.lateMu.Unlock()
	// Only the runs still settling are kept, so a long session holds no more than the
	// runs of the last quarter second.
	kept := r.late[:0]
	for _, c := range r.late {
		select {
		case <-c:
		default:
			kept = append(kept, c)
		}
	}
	r.late = append(kept, settled)
}

// SettleKernel waits until the late kernel refusals of every run started so far are
// recorded (at most kernelSettleBound). Close calls it; a caller that records a run's
// outcome after them (an install hook) calls it after Wait.
func (r *Recorder) SettleKernel() {
	if r == nil {
		return
	}
	r.lateMu.Lock()
	pending := r.late
	r.late = nil
	r.lateMu.Unlock()
	if len(pending) == 0 {
		return
	}
	bound := time.NewTimer(kernelSettleBound)
	defer bound.Stop()
	for _, c := range pending {
		select {
		case <-c:
		case <-bound.C:
			return
		}
	}
}

// KernelDenied records one refusal the kernel made (deny): the sandbox has already
// rate-limited it per run (first occurrence, then the true count at the end), and the
// session's per-kind bound (MaxRepeatRecords) applies on top across runs.
func (r *Recorder) KernelDenied(d sandbox.KernelDenial, command string) {
	details := map[string]any{audit.DetailKind: d.Kind, audit.DetailCount: d.Count}
	if d.Syscall != "" { // a Landlock record names no syscall
		details[audit.DetailSyscall] = d.Syscall
	}
	if d.Object != "" {
		details[audit.DetailObject] = d.Object
	}
	if d.Errno != "" {
		details[audit.DetailErrno] = d.Errno
	}
	if d.When != "" {
		details[audit.DetailWhen] = d.When
	}
	if d.Path != "" {
		details[audit.DetailPath] = d.Path
	}
	if d.Access != "" {
		details[audit.DetailAccess] = d.Access
	}
	if d.Address != "" {
		details[audit.DetailAddress] = d.Address
	}
	if d.Pid != 0 {
		details[audit.DetailPid] = d.Pid
	}
	if d.Traced {
		details[audit.DetailTraced] = true
	}
	if d.Final {
		details[audit.DetailFinal] = true
	}
	if command != "" {
		details[audit.DetailCommand] = command
	}
	r.Record(audit.EventKernelDenied, audit.Deny, KernelDeniedReason(d), details, false)
	if d.Final && d.Count > 2 {
		// The first occurrence and this record were counted as they were recorded; the
		// repeats in between are refusals too, and plugin_exit counts every one.
		r.denied.Add(d.Count - 2)
	}
}

// KernelDeniedReason is the reason code of a kernel_denied record: a path outside the
// grants is path_escape, a destination the run may not reach capability_not_granted
// (network), a deny-listed syscall capability_not_allowed (no grant gives it).
func KernelDeniedReason(d sandbox.KernelDenial) reason.Code {
	switch d.Kind {
	case "path":
		return reason.PathEscape
	case "network":
		return reason.CapabilityNotGranted
	case "landlock":
		// Landlock's blockers name the right: fs.* a path, net.* a port, scope.* a
		// signal or abstract socket outside the sandbox.
		switch {
		case strings.HasPrefix(d.Access, "fs."):
			return reason.PathEscape
		case strings.HasPrefix(d.Access, "net."):
			return reason.CapabilityNotGranted
		}
	}
	return reason.CapabilityNotAllowed
}
