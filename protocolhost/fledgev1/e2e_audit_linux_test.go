// SPDX-License-Identifier: MIT

package fledgev1

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox/linux"
	"github.com/fledgehq/fledge/ui"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requiredDetails are the detail keys an auditor needs of each event a session writes.
var requiredDetails = map[string][]string{
	audit.EventPluginStart: {audit.DetailCommand, audit.DetailArgv, audit.DetailCwdResolved},
	audit.EventPluginExit:  {audit.DetailExitCode, audit.DetailSignal, audit.DetailDurationMS},
	audit.EventExecOutcome: {
		audit.DetailExitCode, audit.DetailSignal, audit.DetailDurationMS, audit.DetailTimedOut,
		audit.DetailOOMKilled, audit.DetailProcsKilled, audit.DetailPeakMemory,
		audit.DetailStdoutBytes, audit.DetailStderrBytes, audit.DetailOutputTruncate,
	},
	audit.EventCwdRefused:      {audit.DetailCwdRequested, audit.DetailMessage},
	audit.EventStore:           {audit.DetailKey},
	audit.EventLoad:            {audit.DetailKey},
	audit.EventPrompt:          {audit.DetailPromptKind, audit.DetailAnswered},
	audit.EventLimit:           {audit.DetailLimit, audit.DetailLimitValue},
	audit.EventMalformed:       {audit.DetailCount, audit.DetailSample},
	audit.EventSandboxDegraded: {audit.DetailMissing},
}

// timeRe is RFC 3339 in UTC with a fractional second (nanosecond resolution, trailing zeros
// trimmed by encoding/json).
var timeRe = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$`)

// TestE2EAuditEveryEventKind runs two real sessions against one log: one with every grant on
// the full sandbox, one with no grants on a sandbox that pretends cgroups are missing. Between
// them, every event a plugin session can cause must be in the log, each record carrying every
// field docs/audit.md lists, and the chain must verify.
func TestE2EAuditEveryEventKind(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	f.opts.Plugin.ManifestDigest = strings.Repeat("ab", 32)
	f.opts.Limits.LineMax = 4096
	f.opts.Limits.ExecTimeoutMax = 5 * time.Second
	out, rep := f.runScript(
		msg("type", "store", "key", "k", "value", "v"),
		msg("type", "store", "key", strings.Repeat("K", 300), "value", "too long a key"),
		msg("type", "load", "id", "l1", "key", "k"),
		msg("type", "metadata", "id", "m1", "keys", []string{"env"}),
		msg("type", "exec", "id", "x1", "command", "echo out; echo err >&2; exit 3"),
		msg("type", "exec", "id", "x2", "command", "sleep 5", "timeout", 0.3),
		msg("type", "exec", "id", "x3", "command", "true", "timeout", 60),
		msg("type", "exec", "id", "x4", "command", "pwd", "cwd", "../../.."),
		msg("type", "prompt", "id", "p1", "message", "Target?", "default", "staging"),
		msg("type", "prompt", "id", "p2", "message", "No default?"),
		msg("_bigline", 10000),
		"not json at all",
		msg("type", "output", "text", "after the bad lines\n"),
	)
	require.Equal(t, 0, out.ExitCode)
	assert.EqualValues(t, 3, f.reply(rep, "x1")["value"].(map[string]any)["code"])
	assert.EqualValues(t, 124, f.reply(rep, "x2")["value"].(map[string]any)["code"])
	// A timeout over timeout_max is clamped and the command runs, saying so.
	x3 := f.reply(rep, "x3")["value"].(map[string]any)
	assert.EqualValues(t, 0, x3["code"])
	assert.Contains(t, x3["stderr"], "clamped to the maximum of 5s")
	assert.Equal(t, "path_escape", f.reply(rep, "x4")["value"].(map[string]any)["reason"])
	assert.Equal(t, "cancel", f.reply(rep, "p2")["type"])
	assert.Contains(t, f.stderr.String(), "store", "a refused store is warned about")

	// Second session: nothing granted, a sandbox without cgroups (a real degradation).
	sb, err := linux.New(linux.Options{DisableCgroups: true})
	require.NoError(t, err)
	f.opts.Sandbox = sb
	f.opts.SessionID = "test-session-2"
	f.opts.Grants = protocol.Capabilities{Filesystem: "none"}
	f.stdout = &syncBuffer{}
	f.opts.UI = ui.New(ui.Options{Out: f.stdout, Err: f.stderr, NonInteractive: true})
	_, rep2 := f.runScript(
		msg("type", "store", "key", "k", "value", "v2"),
		msg("type", "load", "id", "l2", "key", "k"),
		msg("type", "metadata", "id", "m2", "keys", []string{"env"}),
		msg("type", "exec", "id", "x5", "command", "true"),
	)
	assert.Nil(t, f.reply(rep2, "l2")["value"])
	assert.EqualValues(t, 126, f.reply(rep2, "x5")["value"].(map[string]any)["code"])

	recs := f.auditRecords()
	raw := rawRecords(t, f.auditPath)
	require.Len(t, raw, len(recs))
	seen := map[string]bool{}
	decisions := map[string]map[audit.Decision]bool{}
	host, _ := os.Hostname()
	prev := audit.ZeroHash
	for i, r := range recs {
		where := fmt.Sprintf("record %d (%s)", i+1, r.Event)
		seen[r.Event] = true
		if decisions[r.Event] == nil {
			decisions[r.Event] = map[audit.Decision]bool{}
		}
		decisions[r.Event][r.Decision] = true

		assert.Equal(t, audit.SchemaVersion, r.Schema, where)
		assert.EqualValues(t, i+1, r.Seq, where)
		assert.Regexp(t, timeRe, raw[i]["time"], where)
		assert.Equal(t, time.UTC, r.Time.Location(), where)
		assert.Contains(t, []string{"test-session", "test-session-2"}, r.Session, where)
		assert.Equal(t, host, r.Host, where)
		assert.Equal(t, os.Getuid(), r.UID, where)
		assert.Equal(t, os.Getpid(), r.PID, where)
		if assert.NotNil(t, r.Plugin, where) {
			assert.Equal(t, audit.PluginRef{Name: "tp", Version: "1.0.0", Source: "testdata", ManifestDigest: strings.Repeat("ab", 32)}, *r.Plugin, where)
		}
		assert.Contains(t, audit.Events, r.Event, where)
		assert.Contains(t, []audit.Decision{audit.Allow, audit.Deny, audit.Error}, r.Decision, where)
		assert.True(t, reason.Code(r.Reason).Valid(), "%s: reason %q is not in the taxonomy", where, r.Reason)
		if assert.NotNil(t, r.Sandbox, where) {
			assert.Equal(t, "landlock", r.Sandbox.Mode, where)
			assert.Positive(t, r.Sandbox.LandlockABI, where)
			assert.NotEmpty(t, r.Sandbox.CgroupMode, where)
		}
		assert.Equal(t, prev, r.PrevHash, where)
		assert.Regexp(t, `^[0-9a-f]{64}$`, r.Hash, where)
		prev = r.Hash
		for _, k := range requiredDetails[r.Event] {
			assert.Contains(t, r.Details, k, "%s: details %v", where, r.Details)
		}
	}

	for _, ev := range []string{
		audit.EventPluginStart, audit.EventPluginExit, audit.EventExecDecision, audit.EventExecOutcome,
		audit.EventCwdRefused, audit.EventStore, audit.EventLoad, audit.EventMetadata, audit.EventPrompt,
		audit.EventLimit, audit.EventMalformed, audit.EventSandboxDegraded,
	} {
		assert.True(t, seen[ev], "no %s record after the scripted sessions", ev)
	}
	for _, ev := range []string{audit.EventStore, audit.EventLoad, audit.EventMetadata, audit.EventExecDecision, audit.EventPrompt} {
		assert.True(t, decisions[ev][audit.Allow], "%s: no allow record", ev)
		assert.True(t, decisions[ev][audit.Deny], "%s: no deny record", ev)
	}

	// The exec decision has the command, both cwds and the sandbox mode it is about to get.
	var allowed *audit.Record
	for _, r := range f.findRecords(audit.EventExecDecision) {
		if r.Decision == audit.Allow && r.Details[audit.DetailCommand] == "echo out; echo err >&2; exit 3" {
			allowed = r
		}
	}
	require.NotNil(t, allowed, "no allow exec_decision for the first exec")
	assert.Equal(t, "", allowed.Details[audit.DetailCwdRequested])
	assert.Equal(t, f.project, allowed.Details[audit.DetailCwdResolved])
	mode, _ := allowed.Details["sandbox_mode"].(map[string]any)
	assert.Equal(t, "landlock", mode["confinement"])

	outcomes := map[string]*audit.Record{}
	for _, r := range f.findRecords(audit.EventExecOutcome) {
		outcomes[fmt.Sprint(r.Details[audit.DetailCommand])] = r
	}
	if o := outcomes["echo out; echo err >&2; exit 3"]; assert.NotNil(t, o) {
		assert.Equal(t, "3", fmt.Sprint(o.Details[audit.DetailExitCode]))
		assert.Equal(t, "4", fmt.Sprint(o.Details[audit.DetailStdoutBytes]))
		assert.Equal(t, "4", fmt.Sprint(o.Details[audit.DetailStderrBytes]))
		assert.Equal(t, false, o.Details[audit.DetailTimedOut])
		assert.Equal(t, false, o.Details[audit.DetailOutputTruncate])
		assert.Equal(t, "ok", o.Reason)
	}
	if o := outcomes["sleep 5"]; assert.NotNil(t, o) {
		assert.Equal(t, true, o.Details[audit.DetailTimedOut])
		assert.Equal(t, "timeout", o.Reason, "a timeout is never success")
		assert.Equal(t, audit.Error, o.Decision)
	}

	// Limits: the over-long line, the over-long store key, the exec timeout over the max.
	limits := map[string]bool{}
	for _, r := range f.findRecords(audit.EventLimit) {
		limits[fmt.Sprint(r.Details[audit.DetailLimit])] = true
	}
	assert.True(t, limits["line_max"], "line over line_max: %v", limits)
	clamped := false
	for _, r := range f.findRecords(audit.EventExecDecision) {
		if r.Details[audit.DetailCommand] == "true" {
			clamped = clamped || r.Decision == audit.Allow && r.Details["timeout_clamped"] == true &&
				fmt.Sprint(r.Details["timeout_requested_s"]) == "60" && fmt.Sprint(r.Details["timeout_s"]) == "5"
		}
	}
	assert.True(t, clamped, "the exec over timeout_max is allowed, recorded as clamped to 5 s")
	storeLimit := false
	for _, r := range f.findRecords(audit.EventStore) {
		if r.Reason == string(reason.LimitExceeded) {
			storeLimit = true
			assert.Equal(t, "store_key", r.Details[audit.DetailLimit])
			assert.Equal(t, audit.Deny, r.Decision)
		}
	}
	assert.True(t, storeLimit, "the store over the key limit is recorded as limit_exceeded")

	prompts := map[bool]string{}
	for _, r := range f.findRecords(audit.EventPrompt) {
		prompts[r.Details[audit.DetailAnswered] == true] = r.Reason
	}
	assert.Equal(t, "ok", prompts[true], "a prompt answered")
	assert.Equal(t, "non_interactive", prompts[false], "a prompt cancelled")

	mal := f.findRecords(audit.EventMalformed)
	require.Len(t, mal, 1, "malformed lines are counted per session, not one record each")
	assert.Equal(t, "2", fmt.Sprint(mal[0].Details[audit.DetailCount]))

	deg := f.findRecords(audit.EventSandboxDegraded)
	require.Len(t, deg, 1, "only the cgroup-less session is degraded")
	assert.Equal(t, "test-session-2", deg[0].Session)
	assert.Equal(t, "sandbox_unavailable", deg[0].Reason)
	assert.Contains(t, fmt.Sprint(deg[0].Details[audit.DetailMissing]), "cgroup")
	assert.Equal(t, "none", deg[0].Sandbox.CgroupMode)

	vr, err := audit.Verify(f.auditPath)
	require.NoError(t, err)
	assert.True(t, vr.OK, "verify: %+v", vr.Break)
	assert.Equal(t, len(recs), vr.Records)
}

// rawRecords reads the log's lines as generic JSON, to check what is on disk (e.g. the time
// format) rather than what the decoder makes of it.
func rawRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	var out []map[string]any
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestE2EAuditInterruptOnePluginExit: an interrupted session still has exactly one
// plugin_exit record, written after the plugin is gone, naming the signal.
func TestE2EAuditInterruptOnePluginExit(t *testing.T) {
	f := newFixture(t, "sleeper.sh", allGrants)
	sigs := make(chan os.Signal, 1)
	f.opts.Signals = sigs
	go func() {
		time.Sleep(300 * time.Millisecond)
		sigs <- os.Interrupt
	}()
	out := f.run()
	require.True(t, out.Interrupted)
	exits := f.findRecords(audit.EventPluginExit)
	require.Len(t, exits, 1, "one plugin_exit per session")
	assert.Equal(t, "cancelled", exits[0].Reason)
	assert.Equal(t, "interrupt", exits[0].Details["interrupted_by"])
	assert.Equal(t, "SIGKILL", exits[0].Details[audit.DetailSignal], "sleeper ignores cancel and SIGTERM")
}
