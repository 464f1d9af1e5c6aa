// SPDX-License-Identifier: MIT

package core

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func budgetLog(t *testing.T) (*audit.Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "audit.jsonl")
	l, err := audit.Open(path, audit.Options{Fsync: audit.FsyncNever})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, path
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

// TestRecorderBudgetTiers: denials stop at their tier with one budget record; acts go on
// until theirs and are then refused (no record, no act); the session's end records still
// fit; the whole session stays within the budget and the summary counts what was not
// written.
func TestRecorderBudgetTiers(t *testing.T) {
	l, path := budgetLog(t)
	r := NewRecorder(l, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{Confinement: "landlock"}, nil)
	require.NoError(t, r.SetSessionBytes(MinSessionBytes))
	require.NoError(t, r.RecordNow(audit.EventPluginStart, audit.Allow, reason.OK, map[string]any{"command": "x"}))
	key := strings.Repeat("k", 3000)
	for range 500 {
		r.Record(audit.EventStore, audit.Deny, reason.CapabilityNotGranted, map[string]any{audit.DetailKey: key}, false)
	}
	used := r.BytesWritten()
	assert.LessOrEqual(t, used, MinSessionBytes-MinSessionBytes/4, "denials stop at their tier")
	// Acts still have room ...
	_, err := r.BeforeAct(audit.EventExecDecision, map[string]any{"command": "true"})
	require.NoError(t, err, "acts keep their part of the budget after denials spent theirs")
	// ... until they do not: then the act is refused.
	var refused int
	for range 200 {
		if _, err := r.BeforeAct(audit.EventExecDecision, map[string]any{"command": key}); err != nil {
			require.ErrorIs(t, err, ErrSessionBudget)
			refused++
		}
	}
	assert.Positive(t, refused)
	r.Close()
	r.Record(audit.EventPluginExit, audit.Allow, reason.OK, map[string]any{audit.DetailExitCode: 0}, true)
	assert.Zero(t, r.Errors(), "records past the budget are not write errors")
	assert.LessOrEqual(t, fileSize(t, path), MinSessionBytes, "the session stayed within its budget")

	var budget, summary, exit int
	require.NoError(t, audit.Read(path, func(rec *audit.Record) error {
		switch rec.Event {
		case audit.EventLimit:
			if rec.Details[audit.DetailLimit] == "session_log_budget" {
				budget++
			}
		case audit.EventSuppressed:
			summary++
			over := rec.Details["over_budget"].(map[string]any)
			assert.Contains(t, over, "store/deny/capability_not_granted")
			assert.Contains(t, over, "exec_decision/allow/ok")
		case audit.EventPluginExit:
			exit++
		}
		return nil
	}))
	assert.Equal(t, 2, budget, "one budget record per tier that ran out (denials, acts)")
	assert.Equal(t, 1, summary)
	assert.Equal(t, 1, exit, "plugin_exit is written from the end reserve")
	rep, err := audit.Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK, "%v", rep.Break)
}

// TestRecorderBoundsAdapterFields: the detail shapes the other protocol adapters write
// (JSON-RPC and MCP tool names and argument keys, invoke-v1 info lines and ids, hook names),
// filled with plugin-sized strings, come out bounded by the one writer.
func TestRecorderBoundsAdapterFields(t *testing.T) {
	l, path := budgetLog(t)
	r := NewRecorder(l, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{}, nil)
	huge := strings.Repeat("T", 1<<20)
	keys := make([]any, 5000)
	for i := range keys {
		keys[i] = strings.Repeat("a", 200)
	}
	for _, d := range []map[string]any{
		{"tool": huge, "method": huge, "plugin_tool": huge},
		{"tool": "t", "protocol": "mcp", "argument_keys": keys},
		{"info": huge},
		{"protocol": "invoke-v1", "invoke_id": huge, "type": huge, "action": huge},
		{"hook": huge, "error": huge, "nested": map[string]any{"a": []any{[]any{[]any{keys}}}}},
	} {
		_, err := r.BeforeAct(audit.EventToolCall, d)
		require.NoError(t, err)
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		assert.LessOrEqual(t, len(line), 32<<10, "record %d", i+1)
		assert.Contains(t, string(line), audit.TruncatedMarker, "record %d", i+1)
	}
	rep, err := audit.Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK, "%v", rep.Break)
}

// TestRecorderActsRefillPerHour: a long-lived session (a tool provider) gets its act
// allowance again per hour it has lived; denials do not refill.
func TestRecorderActsRefillPerHour(t *testing.T) {
	l, _ := budgetLog(t)
	r := NewRecorder(l, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{}, nil)
	require.NoError(t, r.SetSessionBytes(MinSessionBytes))
	now := time.Now()
	r.budget.now = func() time.Time { return now }
	r.budget.start = now
	big := strings.Repeat("c", 3000)
	calls := func() (n int) {
		for range 1000 {
			if _, err := r.BeforeAct(audit.EventToolCall, map[string]any{"tool": big}); err != nil {
				require.ErrorIs(t, err, ErrSessionBudget)
				return n
			}
			n++
		}
		return n
	}
	first := calls()
	require.Positive(t, first)
	assert.Zero(t, calls(), "refused once spent")
	r.Record(audit.EventStore, audit.Deny, reason.CapabilityNotGranted, map[string]any{audit.DetailKey: big}, false)
	now = now.Add(time.Hour)
	again := calls()
	assert.GreaterOrEqual(t, again, first, "an hour later the acts have their allowance again")
	assert.Less(t, again, 2*first, "... and only once")
	before := r.BytesWritten()
	r.Record(audit.EventStore, audit.Deny, reason.CapabilityNotGranted, map[string]any{audit.DetailKey: big}, false)
	assert.Equal(t, before, r.BytesWritten(), "denials do not refill")
}

// appendSpy is an audit log that says how each record was asked to be written.
type appendSpy struct {
	durable  []bool
	deferred int
}

func (s *appendSpy) Append(*audit.Record, bool) error { return nil }

func (s *appendSpy) AppendBudget(r *audit.Record, durable bool, b audit.Budget) error {
	s.durable = append(s.durable, durable)
	return b.Take(100)
}

func (s *appendSpy) AppendDeferredSyncBudget(*audit.Record, audit.Budget) (func() error, error) {
	s.deferred++
	return func() error { return nil }, nil
}

// TestBeforeActNowIsDurable: the decision a tool or hook call writes before its request is
// sent asks the log for a durable append (on file when it returns), charged to the acts'
// part of the budget, and is refused like BeforeAct once that is spent.
func TestBeforeActNowIsDurable(t *testing.T) {
	spy := &appendSpy{}
	r := NewRecorder(spy, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{Confinement: "landlock"}, nil)
	require.NoError(t, r.BeforeActNow(audit.EventToolCall, map[string]any{"tool": "t"}))
	require.Equal(t, []bool{true}, spy.durable)
	require.Zero(t, spy.deferred, "no background flush")

	l, path := budgetLog(t)
	r = NewRecorder(l, "s", &audit.PluginRef{Name: "p"}, sandbox.Report{Confinement: "landlock"}, nil)
	require.NoError(t, r.SetSessionBytes(MinSessionBytes))
	key := strings.Repeat("k", 3000)
	var refused int
	for range 300 {
		if err := r.BeforeActNow(audit.EventToolCall, map[string]any{"tool": key}); err != nil {
			require.ErrorIs(t, err, ErrSessionBudget)
			refused++
		}
	}
	assert.Positive(t, refused, "past the acts' budget the call is refused (no record, no call)")
	assert.LessOrEqual(t, fileSize(t, path), MinSessionBytes)
}
