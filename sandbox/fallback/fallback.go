// SPDX-License-Identifier: MIT

// Package fallback is fledge's portable restricted mode, for systems without a native
// sandbox (and usable anywhere): the re-exec stub still sets rlimits, a new session (no
// controlling terminal), the guarded working directory and closes inherited fds, and the
// whole process group dies on timeout, cancel and exit. There is no filesystem or network
// confinement and no memory/pids/cpu limit: Report and every Mode say so, and a Strict spec
// is refused with sandbox.ErrUnavailable.
//
// Runner is exported so OS sandboxes that wrap the stub (darwin: sandbox-exec) share the
// same process-group lifecycle.
package fallback

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/fledgehq/fledge/sandbox"
)

// Options configure the fallback sandbox.
type Options struct {
	StubPath string // default os.Executable()
}

// Sandbox is the portable restricted mode.
type Sandbox struct{ runner *Runner }

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Degraded lists what this mode does not enforce.
var Degraded = []string{
	"filesystem confinement",
	"network deny",
	"memory/pids/cpu limits",
	"whole-tree kill (setsid or daemonized children escape the process group)",
}

// New returns the fallback sandbox.
func New(opts Options) (*Sandbox, error) {
	p := opts.StubPath
	if p == "" {
		var err error
		if p, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: locate stub executable: %w", sandbox.ErrUnavailable, err)
		}
	}
	return &Sandbox{runner: &Runner{StubPath: p}}, nil
}

// Mode is the confinement every run gets.
func Mode() sandbox.Mode {
	return sandbox.Mode{Confinement: "none", Cgroup: "none", TreeKill: "pgroup",
		Degraded: append([]string{}, Degraded...)}
}

// Report describes the fallback mode.
func (s *Sandbox) Report() sandbox.Report {
	return sandbox.Report{
		OS:          runtime.GOOS,
		Confinement: "none",
		CgroupMode:  "none",
		NetworkDeny: "none", UnixSocketDeny: "none", NetworkEgress: "none: no confinement here",
		TreeKill: "pgroup",
		Warnings: []string{"no OS sandbox: commands and plugins are not confined (strict policy refuses to run)"},
	}
}

// Start runs spec in restricted mode; Strict specs are refused.
func (s *Sandbox) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Process, error) {
	if spec.Root != "" {
		return nil, sandbox.ErrNoImageRoot
	}
	if spec.Strict {
		return nil, fmt.Errorf("%w: no OS sandbox on %s (%v)", sandbox.ErrUnavailable, runtime.GOOS, Degraded)
	}
	r := *s.runner
	r.Mode = Mode()
	return r.Start(ctx, spec)
}
