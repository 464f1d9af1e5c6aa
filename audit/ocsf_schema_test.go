// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ocsfSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "ocsf", "process_activity-"+OCSFVersion+".schema.json"))
	require.NoError(t, err, "a schema for the OCSF version the mapping claims")
	var s jsonschema.Schema
	require.NoError(t, json.Unmarshal(b, &s))
	rs, err := s.Resolve(nil)
	require.NoError(t, err)
	return rs
}

// ocsfInstance is what a collector reads: the mapped record, encoded and decoded as JSON.
func ocsfInstance(t *testing.T, r *Record) map[string]any {
	t.Helper()
	b, err := marshalCompact(OCSF(r, ExportOptions{ProductVersion: "1.2.3"}))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// TestOCSFValidatesAgainstSchema: every event fledge writes, with every decision and with or
// without a plugin or session, maps to a valid OCSF Process Activity event; so do the
// records of a real log written through the writer.
func TestOCSFValidatesAgainstSchema(t *testing.T) {
	rs := ocsfSchema(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	events := append(append([]string{}, Events...), EventLogTruncated)
	n := 0
	for _, ev := range events {
		for _, d := range []Decision{Allow, Deny, Error} {
			for _, withPlugin := range []bool{true, false} {
				r := &Record{Schema: SchemaVersion, Seq: 7, Time: t0, Host: "h", UID: 1000, PID: 42, Event: ev,
					Decision: d, Reason: "ok", PrevHash: ZeroHash, Hash: ZeroHash,
					Details: map[string]any{DetailCommand: "git status && make", DetailArgv: []any{"git", "status"},
						DetailExitCode: json.Number("3"), DetailDurationMS: json.Number("12"), "plugin_pid": json.Number("99"),
						DetailMessage: "m"}}
				if withPlugin {
					r.Session = "3f2a9c1e0b7d4a55"
					r.Plugin = &PluginRef{Name: "hello", Version: "1.0.0", Source: "/src", ManifestDigest: "sha256:x"}
					r.Sandbox = &SandboxInfo{Mode: "landlock", LandlockABI: 7}
				}
				assert.NoError(t, rs.Validate(ocsfInstance(t, r)), "%s %s plugin=%v", ev, d, withPlugin)
				n++
			}
		}
	}
	t.Logf("%d mapped records valid", n)

	// Records as the writer stores them, read back.
	path := testPath(t)
	l := openLog(t, path, Options{})
	durableN(t, l, 3)
	for _, r := range readAll(t, path) {
		assert.NoError(t, rs.Validate(ocsfInstance(t, r)), "seq %d", r.Seq)
	}
}

// TestOCSFSchemaRejects: the schema is not vacuous: what OCSF forbids fails.
func TestOCSFSchemaRejects(t *testing.T) {
	rs := ocsfSchema(t)
	r := &Record{Seq: 1, Time: time.Unix(1, 0), Event: EventExecDecision, Decision: Deny, Reason: "path_escape",
		Session: "s", Plugin: &PluginRef{Name: "p"}, Details: map[string]any{DetailCommand: "x"}}
	require.NoError(t, rs.Validate(ocsfInstance(t, r)))
	for name, mutate := range map[string]func(m map[string]any){
		"no class_uid":        func(m map[string]any) { delete(m, "class_uid") },
		"wrong class":         func(m map[string]any) { m["class_uid"] = 1001 },
		"time as a string":    func(m map[string]any) { m["time"] = "2026-01-01T00:00:00Z" },
		"pid as a string":     func(m map[string]any) { m["process"] = map[string]any{"pid": "12"} },
		"process without ids": func(m map[string]any) { m["process"] = map[string]any{"name": "x"} },
		"device without type": func(m map[string]any) { m["device"] = map[string]any{"hostname": "h"} },
		"action_id 99":        func(m map[string]any) { m["action_id"] = 99 },
		"not an attribute":    func(m map[string]any) { m["decision"] = "deny" },
		"metadata no version": func(m map[string]any) { delete(m["metadata"].(map[string]any), "version") },
	} {
		m := ocsfInstance(t, r)
		mutate(m)
		assert.Error(t, rs.Validate(m), name)
	}
}
