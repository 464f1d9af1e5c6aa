// SPDX-License-Identifier: MIT

package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/reason"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exportFixture is a real, hash-chained log (testdata/export_log.jsonl, rewritten by
// go test -update) with one record of every kind the host writes, as the host writes them.
const exportFixture = "testdata/export_log.jsonl"

func exportFixtureRecords() []*Record {
	t0 := time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.UTC)
	p := &PluginRef{Name: "hello", Version: "1.2.0", Source: "/src/hello", ManifestDigest: "7c58"}
	sb := &SandboxInfo{Mode: "landlock", LandlockABI: 6, CgroupMode: "v2"}
	prog := "/home/u/.config/fledge/plugins/hello/hello.sh"
	recs := []*Record{
		{Plugin: p, Event: EventInstall, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCapabilities: []string{"exec", "store"}, DetailMessage: "installed from /src/hello"}},
		{Plugin: p, Event: EventGrant, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCapabilities: []string{"exec"}}},
		{Plugin: p, Event: EventRevoke, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCapabilities: []string{"exec"}}},
		{Session: "s2", Plugin: p, Sandbox: sb, Event: EventToolCall, Decision: Allow, Reason: "ok",
			Details: map[string]any{"tool": "plugin_hello_echo", "argument_keys": []string{"text"}}},
		{Session: "s2", Plugin: p, Sandbox: sb, Event: EventToolOutcome, Decision: Allow, Reason: "ok",
			Details: map[string]any{"tool": "plugin_hello_echo", "success": true, DetailDurationMS: 4}},
		{Session: "s2", Plugin: p, Sandbox: sb, Event: EventHookCall, Decision: Allow, Reason: "ok",
			Details: map[string]any{"hook": "context_enhance"}},
		{Session: "s2", Plugin: p, Sandbox: sb, Event: EventHookOutcome, Decision: Error, Reason: "timeout",
			Details: map[string]any{"hook": "context_enhance", DetailDurationMS: 5000}},
		{Session: "s4", Plugin: p, Sandbox: sb, Event: EventHandshake, Decision: Deny, Reason: "capability_not_allowed",
			Details: map[string]any{"protocol": "runtime-v1", "phase": "discovery", "tool": "echo", "allow": []string{"network"},
				"capabilities": []string{"store"}, DetailMessage: "the handshake declares capability \"store\", which is not granted (allowed: network)"}},
		{Session: "s5", Plugin: p, Sandbox: sb, Event: EventPluginInfo, Decision: Allow, Reason: "ok",
			Details: map[string]any{"info": "loading plugin"}},
		{Session: "s5", Plugin: p, Sandbox: sb, Event: EventInvokeRequest, Decision: Allow, Reason: "ok",
			Details: map[string]any{"protocol": "invoke-v1", "invoke_id": "fledge-1", "type": "tool", "action": "invoke_tool", "request_bytes": 42}},
		{Session: "s5", Plugin: p, Sandbox: sb, Event: EventInvokeOutcome, Decision: Error, Reason: "timeout",
			Details: map[string]any{"protocol": "invoke-v1", "invoke_id": "fledge-1", "chunks": 3, "bytes": 120, DetailDurationMS: 30000,
				DetailMessage: "execution timeout exceeded (request fledge-1, 30s)"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventPluginStart, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCommand: "hello", "program": prog, DetailArgv: []string{prog, "--verbose"},
				DetailCwdResolved: "/work/proj", "grants": map[string]any{"exec": true}}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventExecDecision, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCommand: "git status --short", DetailArgv: []string{"sh", "-c", "git status --short"},
				DetailCwdRequested: ".", DetailCwdResolved: "/work/proj", DetailCapability: "exec", "timeout_s": 30}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventExecOutcome, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailCommand: "git status --short", DetailExitCode: 0, DetailDurationMS: 42,
				DetailStdoutBytes: 120, DetailStderrBytes: 0}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventExecOutcome, Decision: Error, Reason: "timeout",
			Details: map[string]any{DetailCommand: "sleep 60", DetailExitCode: -1, DetailSignal: "SIGKILL",
				DetailDurationMS: 30000, DetailTimedOut: true, DetailProcsKilled: 2}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventExecDecision, Decision: Deny, Reason: "capability_not_granted",
			Details: map[string]any{DetailCommand: "curl https://example.com", DetailArgv: []string{"sh", "-c", "curl https://example.com"},
				DetailCapability: "network"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventCwdRefused, Decision: Deny, Reason: "path_escape",
			Details: map[string]any{DetailCwdRequested: "../../etc", DetailMessage: "cwd escapes the project"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventStore, Decision: Deny, Reason: "capability_not_granted",
			Details: map[string]any{DetailKey: "token", DetailBytes: 12, DetailCapability: "store"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventLoad, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailKey: "token", DetailBytes: 12}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventMetadata, Decision: Allow, Reason: "ok"},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventPrompt, Decision: Deny, Reason: "non_interactive",
			Details: map[string]any{DetailPromptKind: "confirm", DetailAnswered: false}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventLimit, Decision: Deny, Reason: "limit_exceeded",
			Details: map[string]any{DetailLimit: "line_bytes", DetailLimitValue: 1048576}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventMalformed, Decision: Deny, Reason: "malformed_message",
			Details: map[string]any{DetailCount: 3, DetailSample: "{not json"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventSuppressed, Decision: Deny, Reason: "limit_exceeded",
			Details: map[string]any{DetailLimit: "records_per_kind", DetailLimitValue: 1000, "suppressed": map[string]any{"store/deny/capability_not_granted": 5}}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventKernelDenied, Decision: Deny, Reason: "capability_not_allowed",
			Details: map[string]any{DetailKind: "syscall", DetailSyscall: "io_uring_setup", DetailErrno: "EPERM", DetailWhen: "always",
				DetailPid: 4242, DetailCount: 100000, DetailFinal: true, DetailCommand: "python3 uring.py"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventKernelDenied, Decision: Deny, Reason: "path_escape",
			Details: map[string]any{DetailKind: "path", DetailSyscall: "openat", DetailPath: "/home/u/.ssh/id_rsa", DetailAccess: "read",
				DetailPid: 4243, DetailCount: 1, DetailTraced: true, DetailCommand: "cat ~/.ssh/id_rsa"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventPluginExit, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailExitCode: 0, DetailDurationMS: 1234, "plugin_pid": 4242, DetailProcsKilled: 0}},
		{Session: "s2", Plugin: p, Sandbox: &SandboxInfo{Mode: "none"}, Event: EventSandboxDegraded, Decision: Deny, Reason: "sandbox_unavailable",
			Details: map[string]any{DetailMissing: []string{"landlock"}}},
		{Event: EventLogRecovered, Decision: Error, Reason: "crashed",
			Details: map[string]any{DetailSkippedOffset: 1024, DetailSkippedBytes: 17, DetailSkippedSHA256: strings.Repeat("ab", 32),
				DetailMessage: "a write was cut short (crash?); the torn bytes are kept and skipped"}},
		{Session: "s1", Plugin: p, Sandbox: sb, Event: EventGitQuarantine, Decision: Deny, Reason: "path_escape",
			Details: map[string]any{"path": "/work/proj/sub/.git", "moved_to": "/work/proj/sub/.git.fledge-quarantine-1772368245",
				"repository": "/work/proj", DetailMessage: "a nested git repository recorded as a gitlink in the index was made or replaced by the run: git status would run its config"}},
		{Plugin: &PluginRef{Name: "old", Version: "0.1.0"}, Event: EventLegacyUnconfined, Decision: Allow, Reason: "ok"},
		{Plugin: p, Event: EventRemove, Decision: Allow, Reason: "ok"},
	}
	// A refused run, as RecordRefusal writes it.
	var refusal *Record
	require := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	require(RecordRefusal(recorderFunc(func(r *Record, _ bool) error { refusal = r; return nil }), Refusal{
		Session: "s3", Plugin: p, Command: "hello", Kind: RefusalManifestChanged,
		Message: "plugin.toml changed since it was approved: reinstall it to review the change",
	}))
	recs = append(recs, refusal)
	// A plugin-chosen command past the field bound, cut by the writer, and the
	// record the log writes before it deletes its oldest files.
	long := "echo " + strings.Repeat("A", 10000)
	recs = append(recs,
		&Record{Session: "s6", Plugin: p, Sandbox: sb, Event: EventExecDecision, Decision: Deny, Reason: "capability_not_granted",
			Details: map[string]any{DetailCommand: long, DetailArgv: []string{"sh", "-c", long}, DetailCapability: "exec"}},
		&Record{Event: EventLogPruned, Decision: Allow, Reason: "ok",
			Details: map[string]any{DetailPrunedFiles: []string{"audit.jsonl.000001"}, DetailPrunedCount: 1, DetailPrunedBytes: 16777300,
				DetailPrunedFirstSeq: 1, DetailPrunedLastSeq: 51234, DetailPrunedLastHash: strings.Repeat("cd", 32), DetailMaxTotalBytes: 268435456,
				DetailMessage: "the oldest rotated files were deleted to keep the log within max_total_bytes"}},
		&Record{Session: "s8", Plugin: p, Event: EventToolChanged, Decision: Deny, Reason: "tool_changed",
			Details: map[string]any{"tool": "plugin_hello_echo", "plugin_tool": "echo", "protocol": "mcp",
				"old_hash": "sha256:" + strings.Repeat("ab", 32), "new_hash": "sha256:" + strings.Repeat("ef", 32)}},
		&Record{Session: "s9", Plugin: p, Event: EventToolsApproved, Decision: Allow, Reason: "ok",
			Details: map[string]any{"tools": []map[string]string{{"tool": "echo", "old_hash": "sha256:" + strings.Repeat("ab", 32),
				"new_hash": "sha256:" + strings.Repeat("ef", 32)}}}},
		&Record{Session: "s10", Plugin: p, Event: EventClientRequest, Decision: Deny, Reason: "capability_not_granted",
			Details: map[string]any{"kind": "sampling", "method": "sampling/createMessage", "request_bytes": 212,
				DetailMessage: "plugin hello was not granted sampling"}},
		&Record{Session: "s10", Plugin: p, Event: EventClientResponse, Decision: Allow, Reason: "ok",
			Details: map[string]any{"kind": "elicitation", "action": "accept", "response_bytes": 64, DetailDurationMS: 5120}},
		&Record{Session: "s10", Plugin: p, Event: EventServerRequest, Decision: Allow, Reason: "ok",
			Details: map[string]any{"method": "resources/read", "uri": "demo://resource/static/1", "result_bytes": 410, DetailDurationMS: 3}},
		// A session's first record under a managed policy carries its digest.
		&Record{Session: "s10", Plugin: p, Event: EventToolRules, Decision: Allow, Reason: "ok", ManagedPolicy: strings.Repeat("5a", 32),
			Details: map[string]any{"allow_added": []string{}, "deny_added": []string{"write_*"}, "reset": false,
				"previous": map[string]any{"allow": []string{}, "deny": []string{}}, "rules": map[string]any{"allow": []string{}, "deny": []string{"write_*"}}}},
		&Record{Session: "s10", Event: EventClientSessionStart, Decision: Allow, Reason: "ok",
			Details: map[string]any{"transport": "streamable-http", "remote": "127.0.0.1:50938"}},
		&Record{Session: "s10", Event: EventClientSessionEnd, Decision: Allow, Reason: "ok",
			Details: map[string]any{"transport": "streamable-http", "remote": "127.0.0.1:50938", "ended": "closed",
				"duration_ms": 1520, "tool_calls": 3, "client_name": "claude-code", "client_version": "2.1.0"}},
	)
	prev := ZeroHash
	for i, r := range recs {
		r.Schema, r.Seq, r.Time = SchemaVersion, uint64(i+1), t0.Add(time.Duration(i)*1500*time.Millisecond)
		r.Host, r.UID, r.PID, r.PrevHash = "build-1", 1000, 777, prev
		n, err := normalize(r)
		require(err)
		if boundRecord(n, DefaultMaxFieldBytes, DefaultMaxListItems) {
			n, err = normalize(n)
			require(err)
		}
		b, err := body(n)
		require(err)
		n.Hash = hashOf(b)
		recs[i], prev = n, n.Hash
	}
	return recs
}

type recorderFunc func(r *Record, durable bool) error

func (f recorderFunc) Append(r *Record, durable bool) error { return f(r, durable) }

func TestExportFixtureIsAValidLog(t *testing.T) {
	if *update {
		var b bytes.Buffer
		w, err := NewRecordWriter(&b, FormatJSON, ExportOptions{})
		require.NoError(t, err)
		for _, r := range exportFixtureRecords() {
			require.NoError(t, w.Write(r))
		}
		require.NoError(t, os.WriteFile(exportFixture, b.Bytes(), 0o644))
	}
	rep, err := Verify(exportFixture)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	recs := readAll(t, exportFixture)
	assert.Len(t, recs, rep.Records)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Event] = true
	}
	for _, e := range Events {
		if e == EventLogTruncated {
			// It marks a gap in the chain by design, so a valid fixture cannot hold one; its
			// mappings are checked by TestOCSFValidatesAgainstSchema.
			continue
		}
		assert.True(t, seen[e], "the fixture has a %s record", e)
	}
}

func exportFixtureOutput(t *testing.T, f Format) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewRecordWriter(&b, f, ExportOptions{ProductVersion: "1.0.0-test"})
	require.NoError(t, err)
	require.NoError(t, Read(exportFixture, w.Write))
	return b.Bytes()
}

func TestExportGolden(t *testing.T) {
	for _, f := range []Format{FormatOCSF, FormatECS} {
		t.Run(string(f), func(t *testing.T) {
			golden(t, "export_"+string(f)+".golden.jsonl", exportFixtureOutput(t, f))
		})
	}
}

// objects decodes one JSON object per line, checking each line is exactly one object.
func objects(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var objs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, MaxLineBytes*2)
	for sc.Scan() {
		require.True(t, json.Valid(sc.Bytes()), "line %d is valid JSON", len(objs)+1)
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		var m map[string]any
		require.NoError(t, d.Decode(&m))
		require.False(t, d.More(), "one object per line")
		objs = append(objs, m)
	}
	require.NoError(t, sc.Err())
	return objs
}

// get walks a dotted path through nested objects.
func get(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, k := range strings.Split(path, ".") {
		o, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = o[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func num(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := v.(json.Number)
	require.True(t, ok, "%v is a number", v)
	i, err := n.Int64()
	require.NoError(t, err)
	return i
}

func strs(v any) []string { return stringList(v) }

func TestOCSFRequiredFields(t *testing.T) {
	recs := readAll(t, exportFixture)
	objs := objects(t, exportFixtureOutput(t, FormatOCSF))
	require.Len(t, objs, len(recs))
	for i, o := range objs {
		r := recs[i]
		for _, k := range []string{"class_uid", "category_uid", "activity_id", "type_uid", "time", "severity_id",
			"status", "status_id", "action_id", "disposition_id", "actor.process.pid", "actor.process.name",
			"actor.user.uid", "process", "device.hostname", "metadata.product.name", "metadata.product.version",
			"metadata.product.vendor_name", "metadata.version", "metadata.uid", "metadata.event_code", "unmapped.prev_hash"} {
			_, ok := get(o, k)
			require.True(t, ok, "seq %d (%s): %s present", r.Seq, r.Event, k)
		}
		assert.EqualValues(t, 1007, num(t, o["class_uid"]))
		assert.EqualValues(t, 1, num(t, o["category_uid"]))
		act := num(t, o["activity_id"])
		assert.EqualValues(t, 100700+act, num(t, o["type_uid"]))
		assert.Equal(t, r.Time.UnixMilli(), num(t, o["time"]))
		assert.NotEmpty(t, o["process"], "process is never empty")
		md, _ := get(o, "metadata.version")
		assert.Equal(t, OCSFVersion, md)
		pv, _ := get(o, "metadata.product.version")
		assert.Equal(t, "1.0.0-test", pv)
		code, _ := get(o, "metadata.event_code")
		assert.Equal(t, r.Event, code, "the fledge event name is always carried")
		uid, _ := get(o, "metadata.uid")
		assert.Equal(t, r.Hash, uid)
		prev, _ := get(o, "unmapped.prev_hash")
		assert.Equal(t, r.PrevHash, prev)

		wantAct := map[string]int64{EventExecDecision: 1, EventPluginStart: 1, EventExecOutcome: 2, EventPluginExit: 2}[r.Event]
		if wantAct == 0 {
			wantAct = 99
			assert.Equal(t, r.Event, o["activity_name"], "Other activities are named by the event")
		}
		assert.Equal(t, wantAct, act, r.Event)
		status := map[Decision]int64{Allow: 1, Deny: 2, Error: 2}[r.Decision]
		sev := map[Decision]int64{Allow: 1, Deny: 3, Error: 4}[r.Decision]
		action := map[Decision]int64{Allow: 1, Deny: 2, Error: 0}[r.Decision]
		assert.Equal(t, status, num(t, o["status_id"]), "seq %d status", r.Seq)
		assert.Equal(t, sev, num(t, o["severity_id"]), "seq %d severity", r.Seq)
		assert.Equal(t, action, num(t, o["action_id"]), "seq %d action", r.Seq)
		assert.Equal(t, r.Reason, o["status_code"])

		if cmd, ok := r.Details[DetailCommand].(string); ok && (r.Event == EventExecDecision || r.Event == EventExecOutcome) {
			got, _ := get(o, "process.cmd_line")
			assert.Equal(t, cmd, got, "seq %d: the exec's command line", r.Seq)
		}
		if v, ok := r.Details[DetailExitCode]; ok {
			assert.Equal(t, v, o["exit_code"])
		}
	}
}

func TestECSRequiredFields(t *testing.T) {
	recs := readAll(t, exportFixture)
	objs := objects(t, exportFixtureOutput(t, FormatECS))
	require.Len(t, objs, len(recs))
	categories := map[string]bool{"process": true, "package": true, "iam": true}
	for i, o := range objs {
		r := recs[i]
		for _, k := range []string{"@timestamp", "ecs.version", "event.kind", "event.category", "event.type",
			"event.outcome", "event.action", "event.reason", "event.sequence", "event.hash", "user.id", "host.hostname",
			"labels.fledge_prev_hash", "fledge.decision"} {
			_, ok := get(o, k)
			require.True(t, ok, "seq %d (%s): %s present", r.Seq, r.Event, k)
		}
		ts, err := time.Parse(time.RFC3339Nano, o["@timestamp"].(string))
		require.NoError(t, err)
		assert.True(t, r.Time.Equal(ts), "@timestamp keeps the nanoseconds")
		ev := o["event"].(map[string]any)
		assert.Equal(t, "event", ev["kind"])
		assert.Equal(t, r.Event, ev["action"])
		assert.Equal(t, r.Hash, ev["hash"])
		assert.Equal(t, map[Decision]string{Allow: "success", Deny: "failure", Error: "unknown"}[r.Decision], ev["outcome"])
		cats := strs(ev["category"])
		require.NotEmpty(t, cats)
		for _, c := range cats {
			assert.True(t, categories[c], "seq %d: category %q", r.Seq, c)
		}
		types := strs(ev["type"])
		require.NotEmpty(t, types)
		if r.Decision == Deny {
			assert.Equal(t, []string{"denied"}, types)
		}
		if ms, ok := detailInt(r.Details[DetailDurationMS]); ok {
			assert.Equal(t, ms*1_000_000, num(t, ev["duration"]), "duration in ns")
		}
		switch r.Event {
		case EventExecDecision, EventExecOutcome:
			got, _ := get(o, "process.command_line")
			assert.Equal(t, r.Details[DetailCommand], got, "seq %d", r.Seq)
		}
		if argv := stringList(r.Details[DetailArgv]); argv != nil {
			got, _ := get(o, "process.args")
			assert.Equal(t, argv, strs(got), "seq %d", r.Seq)
		}
		if v, ok := r.Details[DetailExitCode]; ok {
			got, _ := get(o, "process.exit_code")
			assert.Equal(t, v, got)
		}
		if r.Plugin != nil {
			got, _ := get(o, "package.name")
			assert.Equal(t, r.Plugin.Name, got)
		}
	}
}

// The refusal record maps as a denied launch in both schemas.
func TestExportRefusal(t *testing.T) {
	recs := readAll(t, exportFixture)
	last := -1
	for i, r := range recs {
		if r.Details[DetailRefusal] != nil {
			last = i
		}
	}
	require.GreaterOrEqual(t, last, 0)
	require.Equal(t, RefusalManifestChanged, recs[last].Details[DetailRefusal])
	o := objects(t, exportFixtureOutput(t, FormatOCSF))[last]
	assert.EqualValues(t, 1, num(t, o["activity_id"]))
	assert.Equal(t, "Denied", o["action"])
	assert.Equal(t, string(reason.LaunchFailed), o["status_code"])
	assert.Contains(t, o["status_detail"], "plugin.toml changed")
	e := objects(t, exportFixtureOutput(t, FormatECS))[last]
	typ, _ := get(e, "event.type")
	assert.Equal(t, []string{"denied"}, strs(typ))
	out, _ := get(e, "event.outcome")
	assert.Equal(t, "failure", out)
}

func TestParseFormat(t *testing.T) {
	for _, f := range Formats {
		got, err := ParseFormat(string(f))
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
	_, err := ParseFormat("yaml")
	require.ErrorIs(t, err, ErrUnknownFormat)
	assert.Contains(t, err.Error(), "text, json, ocsf, ecs")
	_, err = NewRecordWriter(&bytes.Buffer{}, "xml", ExportOptions{})
	require.ErrorIs(t, err, ErrUnknownFormat)
}

// The json format is the stored bytes, the text format the table.
func TestRecordWriterStoredAndTable(t *testing.T) {
	stored, err := os.ReadFile(exportFixture)
	require.NoError(t, err)
	assert.Equal(t, string(stored), string(exportFixtureOutput(t, FormatJSON)))
	var b bytes.Buffer
	tw := NewTableWriter(&b)
	for _, r := range readAll(t, exportFixture) {
		require.NoError(t, tw.Write(r))
	}
	assert.Equal(t, b.String(), string(exportFixtureOutput(t, FormatText)))
}

// TestExportTruncatedFields: a command cut by the field bound still exports as a string
// (process.cmd_line, process.command_line) carrying the marker, its length and hash.
func TestExportTruncatedFields(t *testing.T) {
	recs := readAll(t, exportFixture)
	idx := -1
	for i, r := range recs {
		if r.Session == "s6" {
			idx = i
		}
	}
	require.GreaterOrEqual(t, idx, 0)
	cmd, _ := recs[idx].Details[DetailCommand].(string)
	require.Contains(t, cmd, TruncatedMarker+"10005 bytes, sha256 "+hashOf([]byte("echo "+strings.Repeat("A", 10000))))
	assert.LessOrEqual(t, len(cmd), DefaultMaxFieldBytes+120)
	o := objects(t, exportFixtureOutput(t, FormatOCSF))[idx]
	got, _ := get(o, "process.cmd_line")
	assert.Equal(t, cmd, got)
	e := objects(t, exportFixtureOutput(t, FormatECS))[idx]
	got, _ = get(e, "process.command_line")
	assert.Equal(t, cmd, got)
	args, _ := get(e, "process.args")
	assert.Len(t, strs(args), 3)
}
