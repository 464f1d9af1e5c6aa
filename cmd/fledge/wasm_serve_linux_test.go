// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// TestServeWasmToolReverifiesChangedModule: one `fledge serve` runs a WASM tool several
// times. fledge keeps the compiled module in memory between calls; an attacker who replaces
// the installed .wasm between calls (with another module, then with bytes of the same
// length that differ in one byte) must not get the old compiled module served for the new
// bytes, nor the new bytes run under the old record: each call's plugin_start names the
// sha256 of the bytes on disk at that call, and the new module's behaviour is what answers.
func TestServeWasmToolReverifiesChangedModule(t *testing.T) {
	home := setupServeWorld(t)
	src := filepath.Join(t.TempDir(), "bg")
	require.NoError(t, os.MkdirAll(src, 0o755))
	build := func(name, out string) []byte {
		cmd := exec.Command("go", "build", "-o", out, "../../sandbox/wasm/testdata/guests/"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "building %s: %s", name, b)
		data, err := os.ReadFile(out)
		require.NoError(t, err)
		return data
	}
	// benchguest prints "ready" and ends; probe, given no mode, says so and exits 2.
	bench := build("benchguest", filepath.Join(src, "bg.wasm"))
	probe := build("probe", filepath.Join(t.TempDir(), "probe.wasm"))
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(`[plugin]
name = "bg"
version = "1.0.0"
protocol = "fledge-v1"
runtime = "wasm"

[[commands]]
name = "bg"
binary = "bg.wasm"

[[commands.args]]
name = "note"
type = "string"

[capabilities]
filesystem = "none"
`), 0o644))
	out, errOut, code := fledgeMain(t, "--ni", "plugins", "install", src, "--yes")
	require.Equal(t, 0, code, "install: %s%s", out, errOut)
	installed := filepath.Join(home, ".config", "fledge", "plugins", "bg", "bg.wasm")
	require.FileExists(t, installed)
	proj := t.TempDir()

	h := startServe(t, proj, "--protocol", "jsonrpc-2.0")
	result(t, h.call(1, "initialize", map[string]any{"protocol_version": 1}))
	call := func(id int) map[string]any {
		return result(t, h.call(id, "tool/execute", map[string]any{"name": "bg_bg", "arguments": map[string]any{}}))
	}
	for id := 2; id <= 3; id++ {
		r := call(id)
		assert.Equal(t, true, r["success"], "%v", r)
		assert.Contains(t, r["result"], "ready")
	}

	require.NoError(t, os.WriteFile(installed, probe, 0o644))
	r := call(4)
	assert.Equal(t, false, r["success"], "the replaced module answered: %v", r)
	assert.Contains(t, r["result"], "no mode")

	i := bytes.Index(bench, []byte("go:buildid"))
	require.Positive(t, i)
	tampered := bytes.Clone(bench)
	tampered[i+len("go:buildid")+4] ^= 0x01
	require.NoError(t, os.WriteFile(installed, tampered, 0o644))
	r = call(5)
	assert.Equal(t, true, r["success"], "%v", r)

	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	var shas []any
	require.NoError(t, audit.Read(filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		if r.Event == audit.EventPluginStart {
			shas = append(shas, r.Details["module_sha256"])
		}
		return nil
	}))
	assert.Equal(t, []any{sum(bench), sum(bench), sum(probe), sum(tampered)}, shas, "each call records the bytes it ran")
}
