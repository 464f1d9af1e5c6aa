// SPDX-License-Identifier: MIT

package sandbox

import (
	"context"
	"time"
)

// DefaultKillGrace is the time between SIGTERM and SIGKILL when Limits.KillGrace is 0.
const DefaultKillGrace = 2 * time.Second

// StopReason says why a Watchdog stopped a run.
type StopReason int

const (
	StopTimeout StopReason = iota + 1
	StopCancel
)

// Watchdog enforces a run's timeout and its context, the same way in every backend: when
// either fires first, stopping(reason) records why, term() asks the whole tree to stop,
// and if the main process has not exited after the grace period, kill() ends it. It
// returns when the main process has exited (exited is closed) or after kill.
func Watchdog(ctx context.Context, lim Limits, exited <-chan struct{}, stopping func(StopReason), term, kill func()) {
	var timeout <-chan time.Time
	if lim.Timeout > 0 {
		t := time.NewTimer(lim.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-exited:
		return
	case <-timeout:
		stopping(StopTimeout)
	case <-ctx.Done():
		stopping(StopCancel)
	}
	term()
	grace := lim.KillGrace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		kill()
	}
}
