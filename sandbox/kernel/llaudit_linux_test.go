// SPDX-License-Identifier: MIT

package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Records as this kernel (6.18) writes them; a path with a space is hex, as the kernel
// writes any untrusted string it would not quote.
func TestLandlockAuditRecordsMapToTheRun(t *testing.T) {
	w := newLandlockWatch()
	var got []LandlockDenial
	w.runs["fledge-ll000001"] = &watchedRun{on: func(d LandlockDenial) { got = append(got, d) }}
	// Another process's domain: never passed on.
	w.handle(auditLandlockAccess, `audit(1795722167.565:38): domain=156e23e07 blockers=fs.read_dir path="/tmp/x" dev="tmpfs" ino=8`)
	w.handle(auditLandlockDomain, `audit(1795722167.565:38): domain=156e23e07 status=allocated mode=enforcing pid=30260 uid=0 exe="/tmp/t" comm="other"`)
	// Ours: the first denial comes before its domain record, in the same event.
	w.handle(auditLandlockAccess, `audit(1795722168.429:45): domain=156e23e26 blockers=fs.read_file path="/etc/ld.so.cache" dev="vda" ino=1197326`)
	assert.Empty(t, got, "held until the domain record says whose it is")
	w.handle(auditLandlockDomain, `audit(1795722168.429:45): domain=156e23e26 status=allocated mode=enforcing pid=8565 uid=0 exe="/tmp/zzexp" comm="fledge-ll000001"`)
	w.handle(auditLandlockAccess, `audit(1795722168.429:46): domain=156e23e26 blockers=fs.write_file,fs.truncate path=2F746D702F6120622F63 dev="vda" ino=611`)
	w.handle(auditLandlockAccess, `audit(1795722168.431:47): domain=156e23e07 blockers=fs.read_dir path="/tmp/y" dev="tmpfs" ino=9`)
	require.Len(t, got, 2)
	assert.Equal(t, LandlockDenial{Blockers: "fs.read_file", Path: "/etc/ld.so.cache", Object: "dev=vda ino=1197326"}, got[0])
	assert.Equal(t, LandlockDenial{Blockers: "fs.write_file,fs.truncate", Path: "/tmp/a b/c", Object: "dev=vda ino=611"}, got[1])
	assert.Empty(t, w.pending, "the other domain's denials were settled")
	// Deallocated: the ID is forgotten.
	w.handle(auditLandlockDomain, `audit(1795722169.385:48): domain=156e23e26 status=deallocated denials=2`)
	assert.Empty(t, w.domains)
	w.handle(auditLandlockDomain, `audit(1795722169.385:49): domain=156e23e07 status=deallocated denials=2`)
	assert.Empty(t, w.foreign)
}

// The held denials are bounded whatever arrives.
func TestLandlockAuditPendingBounded(t *testing.T) {
	w := newLandlockWatch()
	for i := range 10 * maxPendingDenials {
		w.handle(auditLandlockAccess, `audit(1.0:`+string(rune('0'+i%10))+`): domain=1 blockers=fs.read_file path="/x"`)
	}
	assert.LessOrEqual(t, len(w.pending), maxPendingDenials)
	for _, bad := range []string{"", "audit(", "audit(1.0:1): ", `audit(1.0:1): domain="unterminated`, "garbage=1"} {
		w.handle(auditLandlockAccess, bad) // no panic, nothing held
	}
}

func TestLandlockAuditName(t *testing.T) {
	a, b := LandlockAuditName(), LandlockAuditName()
	assert.NotEqual(t, a, b)
	assert.LessOrEqual(t, len(a), 15, "the kernel's comm is 16 bytes with the NUL")
}

const llNameHelperEnv = "FLEDGE_LL_NAME_HELPER"

// TestLandlockAuditNameHelper prints this process's first launch name (run as a child of
// TestLandlockAuditNamesDifferAcrossProcesses).
func TestLandlockAuditNameHelper(t *testing.T) {
	if os.Getenv(llNameHelperEnv) == "" {
		t.Skip("helper of TestLandlockAuditNamesDifferAcrossProcesses")
	}
	fmt.Printf("name=%s\n", LandlockAuditName())
}

// Every fledge process reads every Landlock record the kernel logs and maps a domain to a
// run by the name its launch thread had: two fledge processes (a serve session and a
// plugins learn) must not both name a launch the same, or each takes the other's denials
// for its own run's. A name a plugin could predict is one it could give a nested Landlock
// domain of its own (prctl PR_SET_NAME, then landlock_restrict_self) to plant records in
// another plugin's run.
func TestLandlockAuditNamesDifferAcrossProcesses(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		cmd := exec.Command(self, "-test.run=^TestLandlockAuditNameHelper$", "-test.v")
		cmd.Env = append(os.Environ(), llNameHelperEnv+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		_, rest, ok := strings.Cut(string(out), "name=")
		require.True(t, ok, "%s", out)
		name, _, _ := strings.Cut(rest, "\n")
		assert.LessOrEqual(t, len(name), 15)
		assert.False(t, seen[name], "launch name %q again in another process", name)
		seen[name] = true
	}
}
