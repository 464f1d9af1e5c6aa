// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(p, got, 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test -update to create %s", p)
	assert.Equal(t, string(want), string(got))
}

func renderFixture() []*Record {
	t0 := time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.UTC)
	p := &PluginRef{Name: "hello", Version: "1.2.0"}
	const sess = "3f2a9c1e0b7d4a55"
	return []*Record{
		{Seq: 1, Time: t0, Session: sess, Plugin: p, Event: EventPluginStart, Decision: Allow, Reason: "ok",
			Details: map[string]any{"pid": 4242}},
		{Seq: 2, Time: t0.Add(time.Millisecond), Session: sess, Plugin: p, Event: EventExecDecision, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCommand: "git status && make <all>", DetailCwdResolved: "/work/proj", DetailArgv: []any{"git", "status"}}},
		{Seq: 3, Time: t0.Add(2 * time.Second), Plugin: p, Event: EventExecOutcome, Decision: Allow, Reason: "timeout",
			Details: map[string]any{DetailExitCode: -1, DetailTimedOut: true, DetailDurationMS: 30000, DetailProcsKilled: 3}},
		{Seq: 4, Time: t0.Add(3 * time.Second), Plugin: &PluginRef{Name: "a-plugin-with-a-very-long-name", Version: "10.20.30"},
			Event: EventCwdRefused, Decision: Deny, Reason: "path_escape",
			Details: map[string]any{DetailCwdRequested: "../../etc\x1b[2J\u202eevil", DetailMessage: strings.Repeat("long ", 40)}},
		{Seq: 5, Time: t0.Add(4 * time.Second), Event: EventSandboxDegraded, Decision: Error, Reason: "sandbox_unavailable"},
		{Seq: 6, Time: t0.Add(5 * time.Second), Plugin: p, Event: EventMalformed, Decision: Deny, Reason: "protocol_version_mismatch",
			Details: map[string]any{DetailCount: 3, DetailSample: "\x00\xff"}},
	}
}

func TestRenderTableGolden(t *testing.T) {
	var b bytes.Buffer
	tw := NewTableWriter(&b)
	for _, r := range renderFixture() {
		require.NoError(t, tw.Write(r))
	}
	out := b.String()
	assert.NotContains(t, out, "\x1b", "terminal escapes are neutralised")
	assert.NotContains(t, out, "\u202e", "bidi overrides are neutralised")
	assert.Contains(t, out, `command="git status && make <all>"`, "details are text, not HTML-escaped JSON")
	assert.NotContains(t, out, `\u0026`)
	assert.Contains(t, out, "  3f2a9c1e0b7d4a55  hello@1.2.0  ", "the session column")
	golden(t, "table.golden", b.Bytes())

	// The text format of `audit show` is this table.
	var s bytes.Buffer
	w, err := NewRecordWriter(&s, FormatText, ExportOptions{})
	require.NoError(t, err)
	for _, r := range renderFixture() {
		require.NoError(t, w.Write(r))
	}
	assert.Equal(t, out, s.String())
}

func TestRenderTableHeaderOnce(t *testing.T) {
	var b bytes.Buffer
	tw := NewTableWriter(&b)
	require.NoError(t, tw.Header())
	require.NoError(t, tw.Header())
	assert.Equal(t, 1, strings.Count(b.String(), "\n"))
	assert.True(t, strings.HasPrefix(b.String(), "TIME (UTC)"))
}

func TestRenderJSONIsStoredBytes(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 3)
	stored, err := os.ReadFile(path)
	require.NoError(t, err)
	var b bytes.Buffer
	w, err := NewRecordWriter(&b, FormatJSON, ExportOptions{})
	require.NoError(t, err)
	require.NoError(t, Read(path, w.Write))
	assert.Equal(t, string(stored), b.String())
}

func TestSanitize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"tab\there", `tab\x09here`},
		{"esc\x1b[31m", `esc\x1b[31m`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"rtl\u202eoverride", `rtl\u202eoverride`},
		{"nul\x00", `nul\x00`},
		{"ünïcödé ✓", "ünïcödé ✓"},
		{"line\u2028sep", `line\u2028sep`},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, Sanitize(tc.in), "%q", tc.in)
	}
}
