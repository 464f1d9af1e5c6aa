// SPDX-License-Identifier: MIT

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// gatePlugin is a JSON-RPC 2.0 tool/hook plugin whose one tool, wait, answers only once it
// holds gateCalls requests of it at once (or, after 10 s, answers "alone"): a host whose
// calls do not reach it together never gets a "together" answer.
const gatePlugin = `#!/usr/bin/env python3
import json, os, sys, time, select
N = %d
held = []
deadline = None
buf = b""
def answer(ids, text):
    for i in ids:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": i, "result": {"success": True, "result": text}}) + "\n")
    sys.stdout.flush()
def lines():
    # Unbuffered: select must see every byte not yet taken.
    global buf
    while b"\n" not in buf:
        timeout = None if deadline is None else max(0, deadline - time.time())
        ready, _, _ = select.select([0], [], [], timeout)
        if not ready:
            return None
        chunk = os.read(0, 65536)
        if not chunk:
            sys.exit(0)
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    return line
while True:
    line = lines()
    if line is None:
        answer(held, "alone"); held = []; deadline = None
        continue
    req = json.loads(line)
    m = req.get("method")
    if m == "initialize":
        r = {"name": "gate", "version": "1.0.0", "description": "answers calls held together", "hooks": [], "priority": 500,
             "tools": [{"name": "wait", "description": "answers once %d calls are in", "parameters": []}]}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": r}) + "\n"); sys.stdout.flush()
    elif m == "tool/execute":
        held.append(req["id"])
        if deadline is None:
            deadline = time.time() + 10
        if len(held) >= N:
            answer(held, "together"); held = []; deadline = None
    elif m == "shutdown":
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {"ok": True}}) + "\n"); sys.stdout.flush()
        break
`

const gateCalls = 4

// TestServePipelinedCallsOverlap: a host that pipelines tool calls (JSON-RPC 2.0 answers
// are matched by id) has them in its plugin together, not one after another: each call's
// tool_call record is on disk before the request went out, so the calls' decisions are all
// in the audit log before the first outcome. A request other than a tool call is answered
// after the calls sent before it.
func TestServePipelinedCallsOverlap(t *testing.T) {
	home := setupServeWorld(t)
	bin := filepath.Join(t.TempDir(), "gate")
	require.NoError(t, os.WriteFile(bin, fmt.Appendf(nil, gatePlugin, gateCalls, gateCalls), 0o755))
	installExe(t, bin, "")

	h := startServe(t, t.TempDir(), "--protocol", "jsonrpc-2.0")
	result(t, h.call(1, "initialize", map[string]any{"protocol_version": 1}))
	for i := 0; i < gateCalls; i++ {
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "tool/execute", "id": 10 + i,
			"params": map[string]any{"name": "gate_wait", "arguments": map[string]any{}}})
		require.NoError(t, err)
		h.send(string(b))
	}
	// Sent behind the calls: answered after every one of them.
	h.send(`{"jsonrpc":"2.0","method":"frobnicate","id":99}`)
	ids := map[float64]bool{}
	for i := 0; i < gateCalls; i++ {
		a := h.answer()
		id, _ := a["id"].(float64)
		require.NotEqual(t, float64(99), id, "a later request was answered before the calls sent before it")
		ids[id] = true
		assert.Equal(t, map[string]any{"success": true, "result": "together"}, result(t, a),
			"call %v: the plugin did not get the pipelined calls together", a["id"])
	}
	assert.Len(t, ids, gateCalls, "each call answered once, by its id")
	assert.Equal(t, float64(99), h.answer()["id"])
	assert.Equal(t, map[string]any{"ok": true}, result(t, h.call(100, "shutdown", map[string]any{})))
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", h.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("fledge serve did not exit after shutdown")
	}

	// On record: every call's decision precedes the first outcome.
	var events []string
	require.NoError(t, audit.Read(filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		if r.Plugin != nil && r.Plugin.Name == "gate" && (r.Event == audit.EventToolCall || r.Event == audit.EventToolOutcome) {
			events = append(events, r.Event+"/"+string(r.Decision))
			if r.Decision == audit.Error {
				t.Logf("error record: %s %v", r.Reason, r.Details)
			}
		}
		return nil
	}))
	want := []string{}
	for i := 0; i < gateCalls; i++ {
		want = append(want, audit.EventToolCall+"/"+string(audit.Allow))
	}
	for i := 0; i < gateCalls; i++ {
		want = append(want, audit.EventToolOutcome+"/"+string(audit.Allow))
	}
	assert.Equal(t, want, events)
}

// TestServeCallSeesChangedDefinition: serve keeps a tool it vetted (its listing, pin check
// and rules) only while the plugin's recorded definition and its pins file are unchanged: a
// definition changed on disk between two calls is held back at the very next call, on
// record, and never reaches the plugin.
func TestServeCallSeesChangedDefinition(t *testing.T) {
	home := setupServeWorld(t)
	hostile, err := os.ReadFile(filepath.Join("testdata", "jsonrpc", "hostile"))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "toolbox")
	require.NoError(t, os.WriteFile(bin, hostile, 0o755))
	installExe(t, bin, "")
	handshake := filepath.Join(home, ".config", "fledge", "plugins", "toolbox", "handshake.json")

	h := startServe(t, t.TempDir(), "--protocol", "jsonrpc-2.0")
	result(t, h.call(1, "initialize", map[string]any{"protocol_version": 1}))
	add := map[string]any{"name": "toolbox_add", "arguments": map[string]any{"a": 2, "b": 40}}
	assert.Equal(t, map[string]any{"success": true, "result": float64(42)}, result(t, h.call(2, "tool/execute", add)))
	// Settled files (the recorded handshake, the pins the first listing wrote), as a
	// long-lived serve's are: what the kept tool's stamps vouch for (a stamp vouches once
	// its file is a second old, internal/filestamp's Settle).
	time.Sleep(1200 * time.Millisecond)
	for i := 0; i < 3; i++ {
		assert.Equal(t, map[string]any{"success": true, "result": float64(42)}, result(t, h.call(3+i, "tool/execute", add)))
	}

	data, err := os.ReadFile(handshake)
	require.NoError(t, err)
	changed := strings.Replace(string(data), `"adds"`, `"adds; also reads ~/.ssh"`, 1)
	require.NotEqual(t, string(data), changed)
	require.NoError(t, os.WriteFile(handshake, []byte(changed), 0o644))
	refused := result(t, h.call(10, "tool/execute", add))
	assert.Equal(t, false, refused["success"])
	assert.Contains(t, refused["result"], "changed since it was approved")

	assert.Equal(t, map[string]any{"ok": true}, result(t, h.call(11, "shutdown", map[string]any{})))
	require.NoError(t, waitExit(h))
	var calls []string
	require.NoError(t, audit.Read(filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		if r.Event == audit.EventToolCall && r.Plugin != nil && r.Plugin.Name == "toolbox" {
			calls = append(calls, string(r.Decision)+"/"+r.Reason)
		}
		return nil
	}))
	assert.Equal(t, []string{"allow/ok", "allow/ok", "allow/ok", "allow/ok", "deny/tool_changed"}, calls)
}

func waitExit(h *testHost) error {
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("fledge serve did not exit after shutdown")
	}
}
