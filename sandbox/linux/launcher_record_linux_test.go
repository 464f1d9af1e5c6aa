// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordDelays are how long a run's decision record takes to become durable in these
// tests: at once (the request carries the launcher's go) and later (the launcher waits for
// a "go" sent once it is).
var recordDelays = []time.Duration{0, 150 * time.Millisecond}

// TestLauncherRunStartsOnlyAfterItsRecord: a command launched by the session's launcher
// starts only once its decision record is durable (BeforeExec returned), whether the
// record was durable before the request was sent or only later: what the command writes
// to disk is never there while BeforeExec runs.
func TestLauncherRunStartsOnlyAfterItsRecord(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	for _, d := range recordDelays {
		t.Run(d.String(), func(t *testing.T) {
			ran := filepath.Join(e.project, "ran-"+d.String())
			var early atomic.Bool
			spec := e.spec(`touch "$0"`, ran)
			spec.BeforeExec = func() error {
				time.Sleep(d)
				if _, err := os.Stat(ran); err == nil {
					early.Store(true)
				}
				return nil
			}
			before := sb.launchers.served.Load()
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			assert.FileExists(t, ran)
			assert.False(t, early.Load(), "the command ran before its record was durable")
			assert.Equal(t, before+1, sb.launchers.served.Load(), "the run did not go through the launcher")
		})
	}
}

// TestLauncherFailedRecordStartsNothing: a decision record that cannot be made durable
// fails the run through the launcher with nothing started (nothing on disk), whether the
// failure is known before the request is sent or only after, and the session's next run
// still goes through its launcher.
func TestLauncherFailedRecordStartsNothing(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	errDisk := errors.New("audit log: disk full")
	for _, d := range recordDelays {
		t.Run(d.String(), func(t *testing.T) {
			ran := filepath.Join(e.project, "ran-"+d.String())
			spec := e.spec(`touch "$0"`, ran)
			spec.BeforeExec = func() error {
				time.Sleep(d)
				return errDisk
			}
			_, err := sb.Start(context.Background(), spec)
			require.Error(t, err)
			assert.ErrorIs(t, err, errDisk)
			time.Sleep(200 * time.Millisecond) // a command started anyway would have run by now
			assert.NoFileExists(t, ran, "a command ran without its record")
		})
	}
	before := sb.launchers.served.Load()
	res, out, errOut := run(t, sb, e.spec(`true`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the launcher no longer serves the session")
}
