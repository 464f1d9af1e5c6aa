// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPidNamespaceHolderSurvivesSignals: the holder is the namespace's init, and a command
// of the session can signal it (same uid). The kernel drops signals to init that have no
// handler, but the Go runtime has a handler for every signal, and for the synchronous ones
// (ABRT, TRAP, SYS, ILL, FPE, BUS, SEGV) sent by kill it crashes the process: the holder
// dies, and with it every other process of the plugin's namespace. Every signal must leave
// the holder (and a sibling run) alive.
func TestPidNamespaceHolderSurvivesSignals(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec(`true`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	sb.pidns.mu.Lock()
	require.Len(t, sb.pidns.holders, 1)
	var h *pidHolder
	for _, v := range sb.pidns.holders {
		h = v
	}
	sb.pidns.mu.Unlock()
	for _, sig := range []string{"ABRT", "TRAP", "SYS", "ILL", "FPE", "BUS", "SEGV", "TERM", "INT", "HUP", "QUIT", "USR1", "PIPE", "ALRM", "XCPU"} {
		res, out, errOut := run(t, sb, e.spec(fmt.Sprintf(`kill -%s 1 2>/dev/null; sleep 0.3; echo alive`, sig)))
		assert.Equal(t, 0, res.ExitCode, "SIG%s: %s%s", sig, out, errOut)
		assert.Equal(t, "alive\n", out, "SIG%s to the holder killed the run itself", sig)
		assert.True(t, h.alive(), "SIG%s from a confined command killed the pid-namespace holder", sig)
		if !h.alive() {
			return
		}
	}
}
