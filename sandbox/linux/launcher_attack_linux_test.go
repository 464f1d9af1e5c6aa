// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// withLauncher runs the session's first command (which starts its launcher) and waits
// until the launcher is up, so that the next runs go through it.
func withLauncher(t *testing.T, sb *Sandbox, e *env) *launcher {
	t.Helper()
	requirePidNS(t, sb)
	res, out, errOut := run(t, sb, e.spec(`true`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		sb.launchers.mu.Lock()
		l := sb.launchers.m[e.spec("").Name]
		sb.launchers.mu.Unlock()
		if l != nil {
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the session's launcher did not start: %v", sb.launchers.lastErr.Load())
	return nil
}

// TestLauncherRunsCommands: after a session's first run, its commands go through the
// launcher, with the same results (output, exit code, working directory, TMPDIR).
func TestLauncherRunsCommands(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	before := sb.launchers.served.Load()
	res, out, errOut := run(t, sb, e.spec(`pwd; echo "$TMPDIR"; touch "$TMPDIR/x" && echo tmp-ok; exit 7`))
	assert.Equal(t, 7, res.ExitCode, "%s%s", out, errOut)
	assert.Contains(t, out, e.project+"\n")
	assert.Contains(t, out, "tmp-ok\n")
	assert.Equal(t, before+1, sb.launchers.served.Load(), "the run did not go through the launcher")
}

// TestLauncherRlimitsFromFirstInstruction: RLIMIT_NOFILE and RLIMIT_CORE are set before
// execve, so not one of 100 commands sees the host's limits.
func TestLauncherRlimitsFromFirstInstruction(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	e := newEnv(t)
	withLauncher(t, sb, e)
	var host unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &host))
	before := sb.launchers.served.Load()
	for i := range 100 {
		spec := e.spec(`ulimit -n; ulimit -c`)
		spec.Limits.NoFile = 321
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		require.Equal(t, "321\n0\n", out, "run %d saw other limits (the host's soft limit is %d)", i, host.Cur)
	}
	assert.Equal(t, before+100, sb.launchers.served.Load())
	_ = strconv.Itoa
	_ = strings.TrimSpace
	_ = fmt.Sprint
}
