package linux

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/internal/testing/testutil"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
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
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) { testLandlockDenials(t, launch) })
	}
}

func testLandlockDenials(t *testing.T, launch string) {
	sb := newSandbox(t, Options{Launch: launch})
	e := newEnv(t)
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
	res, stdout, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
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
