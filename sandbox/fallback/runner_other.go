// SPDX-License-Identifier: MIT

//go:build !unix

package fallback

import (
	"context"
	"fmt"
	"runtime"

	"github.com/fledgehq/fledge/sandbox"
)

// Runner exists on every OS; without Unix process groups it cannot run anything safely.
type Runner struct {
	StubPath string
	Mode     sandbox.Mode
}

// Start refuses: there is no process-group kill on this OS.
func (r *Runner) Start(context.Context, *sandbox.Spec) (sandbox.Process, error) {
	return nil, fmt.Errorf("%w: no process groups on %s", sandbox.ErrUnavailable, runtime.GOOS)
}
