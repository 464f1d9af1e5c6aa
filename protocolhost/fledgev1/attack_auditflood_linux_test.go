// SPDX-License-Identifier: MIT

package fledgev1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The audit log as a weapon. A plugin with no capability at all floods
// requests whose denial records carry strings it chose; before the fix each record of a
// metadata flood (64 keys of 4 KiB) was 256 KiB and ten seconds wrote 257 MiB. The session
// must add at most its byte budget to the log, say so once, count the rest, and the chain
// must still verify.

// testBudget is the session byte budget of the attack tests: small, so that a flood on a
// busy test machine reaches it in a few seconds. FLEDGE_FLOOD_SECONDS=10 with
// FLEDGE_FLOOD_BUDGET=default measures the ten-second flood at the default 8 MiB.
const testBudget = 1 << 20

// withBudget gives the session a recorder with budget n (0: the default).
func (f *fixture) withBudget(n int64) int64 {
	f.t.Helper()
	rec := core.NewRecorder(f.opts.Audit, f.opts.SessionID, &audit.PluginRef{Name: f.opts.Plugin.Name, Version: f.opts.Plugin.Version}, f.opts.Sandbox.Report(), nil)
	if n == 0 {
		return core.DefaultSessionBytes
	}
	require.NoError(f.t, rec.SetSessionBytes(n))
	f.opts.Recorder = rec
	return n
}

// floodLimits bounds a flood: by count (enough to pass the test budget several times over,
// however slow the machine), or by time when FLEDGE_FLOOD_SECONDS is set.
func floodLimits(count int) (seconds float64, n int) {
	if s, err := strconv.ParseFloat(os.Getenv("FLEDGE_FLOOD_SECONDS"), 64); err == nil && s > 0 {
		return s, 1 << 30
	}
	return 120, count
}

func floodBudget() int64 {
	if os.Getenv("FLEDGE_FLOOD_BUDGET") == "default" {
		return 0
	}
	return testBudget
}

// logBytes is the size on disk of every file of the log (rotated files included).
func logBytes(t *testing.T, live string) int64 {
	t.Helper()
	matches, err := filepath.Glob(live + "*")
	require.NoError(t, err)
	var n int64
	for _, m := range matches {
		if strings.HasSuffix(m, ".lock") {
			continue
		}
		fi, err := os.Stat(m)
		require.NoError(t, err)
		n += fi.Size()
	}
	return n
}

type floodReport struct {
	Sent         int            `json:"sent"`
	Replies      int            `json:"replies"`
	Seconds      float64        `json:"seconds"`
	Kinds        map[string]int `json:"kinds"`
	Codes        map[string]int `json:"codes"`
	RefusedAudit int            `json:"refused_audit"`
	Reasons      map[string]int `json:"reasons"`
}

// flood runs flood_audit.py with cfg and returns its report and how much the log grew.
func (f *fixture) flood(cfg map[string]any) (floodReport, int64, time.Duration) {
	f.t.Helper()
	before := logBytes(f.t, f.auditPath)
	js, err := json.Marshal(cfg)
	require.NoError(f.t, err)
	start := time.Now()
	out := f.run(string(js))
	took := time.Since(start)
	require.Equal(f.t, 0, out.ExitCode, "stderr:\n%s", f.stderr.String())
	var rep floodReport
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	require.NoError(f.t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), "stdout:\n%.2000s", f.stdout.String())
	return rep, logBytes(f.t, f.auditPath) - before, took
}

// budgetEvidence checks what the log says about an exhausted budget: one
// session_log_budget record, and the session's summary counting the records not written.
func (f *fixture) budgetEvidence() (unwritten int) {
	f.t.Helper()
	var budget, summaries int
	for _, r := range f.auditRecords() {
		switch {
		case r.Event == audit.EventLimit && r.Details[audit.DetailLimit] == "session_log_budget":
			budget++
		case r.Event == audit.EventSuppressed:
			summaries++
			over, _ := r.Details["over_budget"].(map[string]any)
			for _, v := range over {
				n, _ := v.(json.Number).Int64()
				unwritten += int(n)
			}
		}
	}
	assert.Equal(f.t, 1, budget, "one session_log_budget record")
	assert.Equal(f.t, 1, summaries, "one audit_suppressed summary at session end")
	assert.Positive(f.t, unwritten, "the summary counts the records that were not written")
	return unwritten
}

func (f *fixture) requireVerifies() {
	f.t.Helper()
	rep, err := audit.Verify(f.auditPath)
	require.NoError(f.t, err)
	require.True(f.t, rep.OK, "verify: %v", rep.Break)
}

// TestAttackAuditFloodMetadata: 64 keys of 4 KiB per metadata request, no capability
// granted, for up to 4 s. Before: ~256 KiB per denial record, the log grew by hundreds of
// MiB. After: at most the session budget.
func TestAttackAuditFloodMetadata(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "flood_audit.py", protocol.Capabilities{})
	budget := f.withBudget(floodBudget())
	secs, count := floodLimits(120)
	rep, grew, took := f.flood(map[string]any{"kind": "metadata", "seconds": secs, "count": count, "size": 4096})
	t.Logf("metadata flood: %d requests in %.1fs (host %.1fs), log grew %d bytes (%.1f MiB)", rep.Sent, rep.Seconds, took.Seconds(), grew, float64(grew)/(1<<20))
	assert.Equal(t, rep.Sent, rep.Replies, "every request got its reply")
	assert.LessOrEqual(t, grew, budget, "the session added more than its budget to the log")
	f.budgetEvidence()
	f.requireVerifies()
	// Records that were written keep something useful of the cut strings: the prefix, the
	// original length and its hash.
	var seen bool
	for _, r := range f.findRecords(audit.EventMetadata) {
		keys, _ := r.Details["keys"].([]any)
		require.NotEmpty(t, keys)
		for _, k := range keys {
			k, _ := k.(string)
			assert.LessOrEqual(t, len(k), 4096+200)
			if strings.Contains(k, "…[truncated: 4096 bytes, sha256 ") {
				seen = true
			}
		}
	}
	assert.True(t, seen, "a cut key names its original length and hash")
}

// maxLine is the longest line of the log's live file.
func (f *fixture) maxLine() int {
	f.t.Helper()
	b, err := os.ReadFile(f.auditPath)
	require.NoError(f.t, err)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		n = max(n, len(l))
	}
	return n
}

// TestAttackAuditFloodFields: the other fields a plugin chooses, each flooded from a real
// plugin with no capability: exec command lines of 1 MiB, storage keys of 4 KiB (store has
// no reply, so nothing paces it), load keys, and prompt texts of 1 MiB. The log grows by at
// most the budget, no line is anywhere near the old 256 KiB, and the chain verifies.
func TestAttackAuditFloodFields(t *testing.T) {
	testutil.RequireContained(t)
	cases := []struct {
		kind     string
		size     int
		count    int
		budget   int64 // 0: floodBudget()
		exhausts bool  // the flood is big enough to reach the budget
	}{
		// 1 MiB lines are slow to send on a busy machine: the smallest budget.
		{"exec", 1 << 20, 40, core.MinSessionBytes, true},
		{"store", 4096, 3000, 0, true},
		{"load", 4096, 3000, 0, true},
		// Prompt records carry the kind of question, never the plugin's text.
		{"prompt", 1 << 20, 30, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			f := newFixture(t, "flood_audit.py", protocol.Capabilities{})
			f.opts.Limits.LineMax = 4 << 20
			b := tc.budget
			if b == 0 {
				b = floodBudget()
			}
			budget := f.withBudget(b)
			secs, count := floodLimits(tc.count)
			rep, grew, took := f.flood(map[string]any{"kind": tc.kind, "seconds": secs, "count": count, "size": tc.size})
			t.Logf("%s flood: %d requests in %.1fs (host %.1fs), log grew %d bytes (%.2f MiB), longest line %d", tc.kind, rep.Sent, rep.Seconds, took.Seconds(), grew, float64(grew)/(1<<20), f.maxLine())
			assert.LessOrEqual(t, grew, budget, "the session added more than its budget to the log")
			assert.LessOrEqual(t, f.maxLine(), 32<<10, "a record this large means a plugin-chosen field was not bounded")
			f.requireVerifies()
			if tc.exhausts {
				f.budgetEvidence()
			}
			if tc.kind == "prompt" {
				b, err := os.ReadFile(f.auditPath)
				require.NoError(t, err)
				assert.NotContains(t, string(b), "PPPPPPPP", "prompt texts are not recorded")
			}
		})
	}
}

// TestAttackAuditBudgetRefusesExecs: audit before act holds when the budget runs out. A
// plugin granted exec sends commands padded to 100 KiB that each append a line to a file in
// the project. Past the act tier every exec is refused with its reason and does not run:
// each line in the file has its exec_decision allow record, and none ran unrecorded.
func TestAttackAuditBudgetRefusesExecs(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "flood_audit.py", execGrant)
	f.opts.Limits.LineMax = 1 << 20
	f.withBudget(core.MinSessionBytes)
	ran := filepath.Join(f.project, "ran-"+uniq(t))
	const n = 40
	rep, grew, _ := f.flood(map[string]any{"kind": "exec_append", "target": ran, "size": 100 << 10, "count": n, "window": 1, "seconds": 120})
	require.Equal(t, n, rep.Replies)
	b, _ := os.ReadFile(ran)
	lines := strings.Fields(string(b))
	var decided int
	for _, r := range f.findRecords(audit.EventExecDecision) {
		if r.Decision == audit.Allow {
			decided++
		}
	}
	t.Logf("%d execs: %d ran, %d allow decisions on record, %d refused for the budget (codes %v); log grew %d bytes", n, len(lines), decided, rep.RefusedAudit, rep.Codes, grew)
	assert.Positive(t, rep.RefusedAudit, "the budget ran out and execs were refused")
	assert.Positive(t, len(lines), "execs ran while the budget lasted")
	assert.Equal(t, decided, len(lines), "every command that ran has its decision on record, and only those ran")
	assert.Equal(t, n, len(lines)+rep.RefusedAudit)
	assert.Equal(t, rep.RefusedAudit, rep.Codes["126"])
	assert.Equal(t, rep.RefusedAudit, rep.Reasons["limit_exceeded"], "refused for a bound, and says so")
	var actsRecord bool
	for _, r := range f.findRecords(audit.EventLimit) {
		if r.Details[audit.DetailLimit] == "session_log_budget" && r.Details["tier"] == "acts" {
			actsRecord = true
		}
	}
	assert.True(t, actsRecord, "the budget record says execs are refused")
	assert.LessOrEqual(t, grew, core.MinSessionBytes)
	assert.Equal(t, 1, strings.Count(f.stderr.String(), "raise [audit] session_max_bytes"),
		"the user is told once which setting refuses the execs: %s", f.stderr.String())
	f.budgetEvidence()
	f.requireVerifies()
}

// TestAttackAuditFloodManySessionsPruned: the same flood, session after session, against a
// log with small rotation and total bounds. What is on disk stays within max_total_bytes
// after every session, the oldest files are pruned with log_pruned records, the chain
// verifies across what is kept, and an edit in a kept file still breaks it.
func TestAttackAuditFloodManySessionsPruned(t *testing.T) {
	testutil.RequireContained(t)
	f := newFixture(t, "flood_audit.py", protocol.Capabilities{})
	const total = 512 << 10
	log, err := audit.Open(f.auditPath, audit.Options{Fsync: audit.FsyncNever, RotateBytes: 128 << 10, MaxRecordBytes: audit.MinRecordBytes, MaxTotalBytes: total})
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })
	f.opts.Audit = log
	var written int64
	for i := range 8 {
		f.withBudget(core.MinSessionBytes)
		_, grew, _ := f.flood(map[string]any{"kind": "store", "count": 400, "size": 4096})
		written += max(grew, 0)
		onDisk := logBytes(t, f.auditPath)
		assert.LessOrEqual(t, onDisk, int64(total), "session %d: bytes on disk over max_total_bytes", i)
	}
	rep, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	require.True(t, rep.OK, "verify across what is kept: %v", rep.Break)
	require.Positive(t, rep.PrunedThrough, "the oldest files were pruned")
	t.Logf("8 sessions wrote %d bytes net: %d records kept, seq 1..%d pruned (log_pruned seq %d), %d bytes on disk", written, rep.Records, rep.PrunedThrough, rep.PrunedBy, logBytes(t, f.auditPath))

	kept, err := filepath.Glob(f.auditPath + ".0*")
	require.NoError(t, err)
	require.NotEmpty(t, kept)
	b, err := os.ReadFile(kept[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(kept[0], []byte(strings.Replace(string(b), `"decision":"deny"`, `"decision":"allow"`, 1)), 0o600))
	rep, err = audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.False(t, rep.OK, "an edit in a kept file still breaks the chain")
}
