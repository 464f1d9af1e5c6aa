// SPDX-License-Identifier: MIT

package fledgev1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Landlock's own refusals are records where the kernel reports them: with the kernel's
// audit on (the harness turns it on for this test and back after; fledge never does), a
// plugin's command listing the home directory (shown in its private view only to hold
// the project, closed by Landlock) leaves a kernel_denied record of kind landlock in the
// plugin's session, with the path, the missing right and the command.
func TestAttackLandlockDeniedRecorded(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported() && kernel.NotifySupported(), "seccomp user notification (Linux 5.5+)")
	testutil.SkipUnlessSupported(t, kernel.LandlockABI() >= 7, "Landlock ABI 7 (denials in the kernel's audit)")
	testutil.KernelAudit(t)
	f := newFixture(t, "attack_exec.py", execGrant)
	list := `ls "` + f.home + `"; echo rc=$?`
	_, rep := f.runScript(execSteps([]attackExec{{"list", list}}, 0)...)
	f.assertAlive(rep)
	out := f.execValue(rep, "list")
	assert.Contains(t, out["stdout"], "rc=2", "refused: %v", out)

	var hit *audit.Record
	for _, r := range f.findRecords(audit.EventKernelDenied) {
		if r.Details[audit.DetailKind] == "landlock" && r.Details[audit.DetailPath] == f.home {
			hit = r
		}
	}
	require.NotNil(t, hit, "no landlock kernel_denied for %s: %v", f.home, f.findRecords(audit.EventKernelDenied))
	// The exec's reply did not wait for it (it comes through the kernel's audit, late),
	// but the session's end did: it is on record before plugin_exit.
	var order []string
	for _, r := range f.auditRecords() {
		if r.Seq == hit.Seq || r.Event == audit.EventPluginExit {
			order = append(order, r.Event)
		}
	}
	assert.Equal(t, []string{audit.EventKernelDenied, audit.EventPluginExit}, order, "landlock record before plugin_exit")
	assert.Equal(t, audit.Deny, hit.Decision)
	assert.Equal(t, "test-session", hit.Session)
	assert.Equal(t, "fs.read_dir", hit.Details[audit.DetailAccess])
	assert.Equal(t, "path_escape", hit.Reason)
	assert.Equal(t, list, hit.Details[audit.DetailCommand])
	assert.NotContains(t, hit.Details, audit.DetailSyscall, "a Landlock record names no syscall")
	vr, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.True(t, vr.OK, "audit chain: %+v", vr.Break)
}
