// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// walkthroughPlugin is written the way plugins for the Rust fledge host are (its published
// bash walkthrough plugin has this shape): strict mode, one blocking read per question, the
// answer cut out of the reply with sed, so a cancelled question reads as an empty answer and
// the script goes on to its next step. That host leaves the plugin on the terminal, so Ctrl+C
// kills it in its read; nothing in the script expects to go on after one.
const walkthroughPlugin = `#!/usr/bin/env bash
set -euo pipefail
exec 3>&1
send() { printf '%s\n' "$1" >&3; }
request() { printf '%s\n' "$1" >&3; read -r REPLY_LINE; echo "$REPLY_LINE"; }
value() { sed -n 's/.*"value"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p'; }
read -r INIT_MSG
send '{"type":"output","text":"Welcome to the walkthrough\n"}'
NAME=$(request '{"type":"prompt","id":"1","message":"What is your name?","default":"world"}' | value)
send "{\"type\":\"output\",\"text\":\"Hello, ${NAME}!\n\"}"
RESP=$(request '{"type":"confirm","id":"2","message":"Run the full demo?","default":true}')
if echo "$RESP" | grep -q '"value"[[:space:]]*:[[:space:]]*false'; then
  send '{"type":"output","text":"Okay, exiting early.\n"}'
  exit 0
fi
COLOR=$(request '{"type":"select","id":"3","message":"Pick a color:","options":["red","green","blue"],"default":1}' | value)
# The step a person pressing Ctrl+C means to stop (a deploy, say).
touch "$FLEDGE_DATA_DIR/deployed"
sleep 0.3
send '{"type":"output","text":"All done! Every step ran.\n"}'
`

// installPlugin installs a fledge-v1 plugin with one command, name, running script.
func (e *ptyEnv) installPlugin(t *testing.T, name, script string) string {
	t.Helper()
	src := filepath.Join(filepath.Dir(e.home), "src", name)
	require.NoError(t, os.MkdirAll(src, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(`[plugin]
name = "`+name+`"
version = "0.1.0"
protocol = "fledge-v1"

[[commands]]
name = "`+name+`"
binary = "`+name+`.sh"
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, name+".sh"), []byte(script), 0o755))
	install := exec.Command(e.fledge, "--ni", "plugins", "install", src)
	install.Env, install.Dir = e.env, e.work
	out, err := install.CombinedOutput()
	require.NoError(t, err, "install: %s", out)
	return filepath.Join(e.home, ".config", "fledge", "plugins", name)
}

// TestPTYCtrlCStopsHostPlugin: Ctrl+C at the first question of a plugin written for the
// Rust fledge host stops it there, as that host's terminal would: its later steps never run
// (no marker, no "All done"), fledge exits 130, no process of the plugin is left, and the
// audit log records the session as cancelled by SIGINT.
func TestPTYCtrlCStopsHostPlugin(t *testing.T) {
	e := newPtyEnv(t, "")
	dir := e.installPlugin(t, "walk", walkthroughPlugin)
	p := e.startArgs(t, false, "walk")
	p.waitFor("What is your name")
	start := time.Now()
	p.press("\x03")
	assert.Equal(t, 130, p.exit(), "screen:\n%q", p.screen.String())
	took := time.Since(start)
	t.Logf("Ctrl+C to fledge's exit: %v", took)
	assert.Less(t, took, 3*time.Second, "the plugin stops at once, not after the ladder's SIGTERM")

	screen := p.screen.String()
	assert.NotContains(t, screen, "All done", "the plugin went on after Ctrl+C")
	assert.NotContains(t, screen, "Run the full demo", "no later question is shown")
	assert.NoFileExists(t, filepath.Join(dir, "data", "deployed"), "the plugin's next step ran after Ctrl+C")

	// No process of the plugin is left.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), "walk.sh") {
			t.Errorf("a plugin process is still running: %s %q", f, b)
		}
	}

	var exit *audit.Record
	require.NoError(t, audit.Read(filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"), func(r *audit.Record) error {
		if r.Event == audit.EventPluginExit && r.Plugin != nil && r.Plugin.Name == "walk" {
			exit = r
		}
		return nil
	}))
	require.NotNil(t, exit, "no plugin_exit record")
	assert.Equal(t, "cancelled", exit.Reason)
	assert.Equal(t, "SIGINT", exit.Details[audit.DetailSignal], "the plugin ended by the SIGINT: %v", exit.Details)
}
