// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// The audit package's fixture: a real, verifying log with one record of every kind.
var auditFixture = filepath.Join("..", "..", "audit", "testdata", "export_log.jsonl")

// runFledge runs the CLI in-process and returns stdout, stderr and the exit code.
func runFledge(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, Streams{In: os.Stdin, Out: &out, Err: &errb})
	return out.String(), errb.String(), code
}

// seqsOf extracts, per output line, the seq of the record it renders.
func seqsOf(t *testing.T, format, out string) []uint64 {
	t.Helper()
	var seqs []uint64
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if out == "" {
		return nil
	}
	row := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\s+(\d+)\s`)
	for i, l := range lines {
		if format == "text" {
			if i == 0 {
				require.True(t, strings.HasPrefix(l, "TIME (UTC)"), "header first: %q", l)
				continue
			}
			m := row.FindStringSubmatch(l)
			require.NotNil(t, m, "a table row: %q", l)
			n, err := strconv.ParseUint(m[1], 10, 64)
			require.NoError(t, err)
			seqs = append(seqs, n)
			continue
		}
		require.True(t, json.Valid([]byte(l)), "line %d is one JSON object: %q", i+1, l)
		var o map[string]any
		d := json.NewDecoder(strings.NewReader(l))
		d.UseNumber()
		require.NoError(t, d.Decode(&o))
		var seq any
		switch format {
		case "json":
			seq = o["seq"]
		case "ocsf":
			seq = o["metadata"].(map[string]any)["sequence"]
		case "ecs":
			seq = o["event"].(map[string]any)["sequence"]
		}
		n, err := strconv.ParseUint(string(seq.(json.Number)), 10, 64)
		require.NoError(t, err)
		seqs = append(seqs, n)
	}
	return seqs
}

// Every filter works with every format, and each format renders exactly the records the
// filter selects, in order.
func TestAuditShowFormatsAndFilters(t *testing.T) {
	abs, err := filepath.Abs(auditFixture)
	require.NoError(t, err)
	t.Setenv("FLEDGE_AUDIT_LOG", abs)
	filters := []struct {
		name  string
		args  []string
		match audit.Filter
	}{
		{"all", nil, audit.Filter{}},
		{"plugin", []string{"--plugin", "hello"}, audit.Filter{Plugin: "hello"}},
		{"decision", []string{"--decision", "deny"}, audit.Filter{Decision: audit.Deny}},
		{"event", []string{"--event", "exec_outcome"}, audit.Filter{Event: audit.EventExecOutcome}},
		{"session", []string{"--session", "s1"}, audit.Filter{Session: "s1"}},
		{"combined", []string{"--session", "s1", "--decision", "allow"}, audit.Filter{Session: "s1", Decision: audit.Allow}},
		{"since all", []string{"--since", strconv.Itoa(int(time.Since(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)).Hours())+1) + "h"}, audit.Filter{}},
		{"since none", []string{"--since", "1h"}, audit.Filter{Since: time.Now().Add(-time.Hour)}},
		{"no match", []string{"--event", "no_such_event"}, audit.Filter{Event: "no_such_event"}},
	}
	formats := []struct {
		name string
		args []string
	}{
		{"text", nil},
		{"text", []string{"--format", "text"}},
		{"json", []string{"--json"}},
		{"json", []string{"--format", "json"}},
		{"json", []string{"--json", "--format", "json"}},
		{"ocsf", []string{"--format", "ocsf"}},
		{"ecs", []string{"--format", "ecs"}},
	}
	for _, fl := range filters {
		var want []uint64
		require.NoError(t, audit.Query(abs, fl.match, func(r *audit.Record) error { want = append(want, r.Seq); return nil }))
		for _, fm := range formats {
			args := append(append([]string{"audit", "show"}, fm.args...), fl.args...)
			t.Run(fl.name+"/"+strings.Join(fm.args, "_"), func(t *testing.T) {
				out, errOut, code := runFledge(t, args...)
				require.Equal(t, 0, code, "stderr: %s", errOut)
				assert.Equal(t, want, seqsOf(t, fm.name, out))
				if len(want) == 0 && fm.name == "text" {
					assert.Contains(t, errOut, "no matching records")
				}
			})
		}
	}
}

func TestAuditShowFormatOutput(t *testing.T) {
	abs, err := filepath.Abs(auditFixture)
	require.NoError(t, err)
	t.Setenv("FLEDGE_AUDIT_LOG", abs)
	stored, err := os.ReadFile(abs)
	require.NoError(t, err)

	out, _, code := runFledge(t, "audit", "show", "--json")
	require.Equal(t, 0, code)
	assert.Equal(t, string(stored), out, "--json prints the lines as stored")

	out, _, code = runFledge(t, "audit", "show", "--format", "ocsf", "--event", "exec_decision", "--decision", "deny", "--session", "s1")
	require.Equal(t, 0, code)
	var o map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &o))
	assert.EqualValues(t, 1007, o["class_uid"])
	assert.EqualValues(t, 1, o["activity_id"])
	assert.Equal(t, "Denied", o["action"])
	assert.Equal(t, "capability_not_granted", o["status_code"])
	assert.Equal(t, version, o["metadata"].(map[string]any)["product"].(map[string]any)["version"], "the CLI's version")
	assert.Equal(t, "curl https://example.com", o["process"].(map[string]any)["cmd_line"])

	out, _, code = runFledge(t, "audit", "show", "--format", "ecs", "--event", "exec_outcome", "--decision", "error")
	require.Equal(t, 0, code)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &e))
	ev := e["event"].(map[string]any)
	assert.Equal(t, "unknown", ev["outcome"])
	assert.Equal(t, "timeout", ev["reason"])
	assert.EqualValues(t, 30000*1_000_000, ev["duration"])
	assert.Equal(t, "sleep 60", e["process"].(map[string]any)["command_line"])
}

func TestAuditShowFormatUsage(t *testing.T) {
	abs, err := filepath.Abs(auditFixture)
	require.NoError(t, err)
	t.Setenv("FLEDGE_AUDIT_LOG", abs)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--format", "yaml"}, `--format must be text, json, ocsf or ecs, not "yaml"`},
		{[]string{"--format", "OCSF"}, `not "OCSF"`},
		{[]string{"--json", "--format", "ecs"}, "--json contradicts --format ecs"},
		{[]string{"--format", "ocsf", "--decision", "maybe"}, "--decision must be allow, deny or error"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runFledge(t, append([]string{"audit", "show"}, tc.args...)...)
			assert.Equal(t, ExitUsage, code)
			assert.Contains(t, errOut, tc.want)
			assert.Empty(t, out, "nothing on stdout for a collector to ingest")
		})
	}
}

// TestAuditVerifyPrunedLog: a log that pruned its oldest files (max_total_bytes) verifies,
// says what was pruned, and show works across what is kept; a kept file deleted by hand
// from the start is still a break.
func TestAuditVerifyPrunedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "audit.jsonl")
	t.Setenv("FLEDGE_AUDIT_LOG", path)
	l, err := audit.Open(path, audit.Options{Fsync: audit.FsyncNever, RotateBytes: 32 << 10, MaxRecordBytes: audit.MinRecordBytes, MaxTotalBytes: 128 << 10})
	require.NoError(t, err)
	for i := range 600 {
		require.NoError(t, l.Append(&audit.Record{Event: audit.EventStore, Decision: audit.Deny, Reason: "capability_not_granted",
			Details: map[string]any{audit.DetailKey: strings.Repeat("k", 500) + strconv.Itoa(i)}}, false))
	}
	require.NoError(t, l.Close())
	out, errOut, code := runFledge(t, "audit", "verify")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Regexp(t, `(?m)^pruned: seq 1\.\.\d+ deleted by fledge`, out)
	out, _, code = runFledge(t, "audit", "show", "--format", "ecs", "--event", audit.EventLogPruned)
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"action":"log_pruned"`)

	matches, err := filepath.Glob(path + ".0*")
	require.NoError(t, err)
	require.NotEmpty(t, matches)
	require.NoError(t, os.Remove(matches[0]))
	out, _, code = runFledge(t, "audit", "verify")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, out, "BROKEN: deleted")
}
