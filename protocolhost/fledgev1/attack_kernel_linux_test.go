// SPDX-License-Identifier: MIT

package fledgev1

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Kernel refusals are records: a plugin's commands call syscalls on the seccomp deny-list
// (a user namespace, io_uring, the same refused call 100,000 times, a vsock socket) and each
// refusal is a kernel_denied deny record of the plugin's session, naming the syscall, the
// errno, the command and, for a socket, the family it asked for; the loop leaves a bounded number of records with its true count.
func TestAttackKernelDeniedRecorded(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported() && kernel.NotifySupported(), "seccomp user notification (Linux 5.5+)")
	f := newFixture(t, "attack_exec.py", execGrant)
	const py = "/usr/bin/python3 -c "
	userns := "unshare --user true; echo rc=$?"
	uring := py + `'import ctypes,os; r=ctypes.CDLL(None,use_errno=True).syscall(425,1,ctypes.create_string_buffer(120)); print(r, os.strerror(ctypes.get_errno()))'`
	loop := py + `'import ctypes; s=ctypes.CDLL(None).syscall
for i in range(100000): s(425, 1, 0)
print("looped")'`
	vsock := py + `'import ctypes,os; r=ctypes.CDLL(None,use_errno=True).socket(40,1,0); print(r, os.strerror(ctypes.get_errno()))'`
	_, rep := f.runScript(execSteps([]attackExec{{"userns", userns}, {"uring", uring}, {"loop", loop}, {"vsock", vsock}}, 0)...)
	f.assertAlive(rep)
	assert.Contains(t, f.execValue(rep, "vsock")["stdout"], "-1 Permission denied")
	assert.Contains(t, f.execValue(rep, "userns")["stdout"], "rc=1")
	assert.Contains(t, f.execValue(rep, "uring")["stdout"], "-1 Operation not permitted")
	assert.Contains(t, f.execValue(rep, "loop")["stdout"], "looped")

	byCmd := map[string][]*audit.Record{}
	for _, r := range f.findRecords(audit.EventKernelDenied) {
		assert.Equal(t, audit.Deny, r.Decision)
		assert.Equal(t, "test-session", r.Session, "in the session of the plugin that caused it")
		cmd, _ := r.Details[audit.DetailCommand].(string)
		byCmd[cmd] = append(byCmd[cmd], r)
	}
	one := func(cmd, syscall string) {
		t.Helper()
		recs := byCmd[cmd]
		require.NotEmpty(t, recs, "no kernel_denied for %q: %v", cmd, byCmd)
		assert.Equal(t, syscall, recs[0].Details[audit.DetailSyscall])
		assert.Equal(t, "EPERM", recs[0].Details[audit.DetailErrno])
		assert.Equal(t, "syscall", recs[0].Details[audit.DetailKind])
		assert.Equal(t, "capability_not_allowed", recs[0].Reason)
	}
	one(userns, "unshare")
	one(uring, "io_uring_setup")
	one(loop, "io_uring_setup")
	// A refused socket family: the record says what the call asked for.
	if recs := byCmd[vsock]; assert.NotEmpty(t, recs, "no kernel_denied for the vsock socket: %v", byCmd) {
		assert.Equal(t, "socket", recs[0].Details[audit.DetailSyscall])
		assert.Equal(t, "EACCES", recs[0].Details[audit.DetailErrno])
		assert.Equal(t, "family=AF_VSOCK type=SOCK_STREAM protocol=0", recs[0].Details[audit.DetailObject])
	}
	recs := byCmd[loop]
	assert.LessOrEqual(t, len(recs), 3, "a loop of refusals is bounded in the log")
	var total float64
	for _, r := range recs {
		if r.Details[audit.DetailFinal] == true {
			total = num(r.Details[audit.DetailCount])
		}
	}
	assert.EqualValues(t, 100000, total, "the final record has the true count: %v", recs)
	vr, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.True(t, vr.OK, "audit chain: %+v", vr.Break)
}

// Trace mode: a command that reads the user's SSH key (outside its grants, not even in its
// view) leaves a kernel_denied record with that path; without trace, none.
func TestAttackTraceRecordsPath(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported() && kernel.NotifySupported(), "seccomp user notification (Linux 5.5+)")
	for _, trace := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "trace"}[trace], func(t *testing.T) {
			f := newFixture(t, "attack_exec.py", execGrant)
			s := plantSecrets(t, f)
			rec := core.NewRecorder(f.opts.Audit, "test-session", nil, f.opts.Sandbox.Report(), nil)
			rec.SetTrace(trace)
			f.opts.Recorder = rec
			read := "cat " + s.sshPath
			_, rep := f.runScript(execSteps([]attackExec{{"read", read}}, 0)...)
			f.assertAlive(rep)
			s.assertNoLeak(t, "trace", f.execValue(rep, "read")["stdout"].(string))
			var paths []string
			for _, r := range f.findRecords(audit.EventKernelDenied) {
				if r.Details[audit.DetailKind] == "path" {
					p, _ := r.Details[audit.DetailPath].(string)
					paths = append(paths, p)
					assert.Equal(t, true, r.Details[audit.DetailTraced])
					assert.Equal(t, "path_escape", r.Reason)
				}
			}
			if trace {
				assert.Contains(t, paths, s.sshPath)
			} else {
				assert.Empty(t, paths)
			}
		})
	}
}
