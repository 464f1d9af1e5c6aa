// SPDX-License-Identifier: MIT

package linux

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// A command's access that Landlock refuses, in a path the private view shows (the parent
// of a granted directory exists in the view only to hold it), is a "landlock" refusal of
// the run, read from the kernel's audit: the path, the missing rights, counted.
func TestLandlockDenialsRecorded(t *testing.T) {
	testutil.RequireContained(t)
	requireNotify(t)
	testutil.SkipUnlessSupported(t, kernel.LandlockABI() >= 7, "Landlock ABI 7 (denials in the kernel's audit)")
	testutil.KernelAudit(t)
	require.True(t, kernel.LandlockAuditReadable(), "root reads the kernel's audit (CAP_AUDIT_READ)")
	for _, launch := range []string{LaunchThread, LaunchStub, launchViaLauncher} {
		t.Run(launch, func(t *testing.T) { testLandlockDenials(t, launch, false) })
		t.Run(launch+"-late", func(t *testing.T) { testLandlockDenials(t, launch, true) })
	}
}

// launchViaLauncher: the run goes through the session's launcher (started by the session's
// first runs), whose request names the run for its Landlock records.
const launchViaLauncher = "launcher"

// late: the spec lets Wait return before the Landlock records settle (KernelDenialsLate,
// what every session does): Wait must hand over a channel that is still open when it
// returns (the settle takes at least landlockDrain), and every denial and the true count
// must still be reported before that channel closes.
func testLandlockDenials(t *testing.T, launch string, late bool) {
	e := newEnv(t)
	var sb *Sandbox
	if launch == launchViaLauncher {
		sb = newSandbox(t, Options{Launch: LaunchThread})
		withLauncher(t, sb, e)
	} else {
		sb = newSandbox(t, Options{Launch: launch})
	}
	served := sb.launchers.served.Load()
	script := `for i in 1 2 3; do ls "$HOME" 2>&1; echo ls=$?; done`
	// Positive control: unconfined, it works.
	ctl := exec.Command("/bin/sh", "-c", script)
	ctl.Env = []string{"HOME=" + e.home, "PATH=/usr/bin:/bin"}
	out, err := ctl.CombinedOutput()
	require.NoError(t, err)
	require.Contains(t, string(out), "ls=0")

	var got denials
	spec := e.spec(script)
	spec.KernelDenials = got.add
	var settled <-chan struct{}
	if late {
		spec.KernelDenialsLate = func(c <-chan struct{}) {
			require.Nil(t, settled, "called once")
			settled = c
		}
	}
	res, stdout, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	if launch == launchViaLauncher {
		require.Equal(t, served+1, sb.launchers.served.Load(), "the run did not go through the launcher")
	}
	if late {
		require.NotNil(t, settled, "Wait handed over the settle")
		select {
		case <-settled:
			t.Fatal("Wait waited for the Landlock records to settle")
		default:
		}
		select {
		case <-settled:
		case <-time.After(5 * time.Second):
			t.Fatal("the settle never ended")
		}
	}
	assert.Contains(t, stdout, "Permission denied", "ls $HOME refused by Landlock, not hidden")
	assert.NotContains(t, stdout, "ls=0")
	t.Logf("%s reported: %+v", launch, got.list())

	var read *sandbox.KernelDenial
	var first, final int64
	for _, d := range got.list() {
		if d.Kind == "landlock" && d.Path == e.home && strings.Contains(d.Access, "fs.read_dir") {
			read = &d
			if d.Final {
				final = d.Count
			} else {
				first = d.Count
			}
		}
	}
	require.NotNil(t, read, "no Landlock denial of %s reported: %+v", e.home, got.list())
	assert.Equal(t, int64(1), first, "the first denial at once")
	assert.Equal(t, int64(3), final, "then the true count when the run ended")
	assert.Contains(t, read.Object, "ino=")
}
