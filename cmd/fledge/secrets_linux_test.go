//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secretPlugin says whether it got SVC_TOKEN (and which value, by a marker, never the
// value itself) and what a command it runs sees.
const secretPlugin = `#!/usr/bin/python3
import json, os, sys
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
v = os.environ.get("SVC_TOKEN")
send({"type": "output", "text": "plugin-sees %s\n" % ("unset" if v is None else ("store" if v == "value-from-store-9f3" else ("env" if v == "value-from-env-7a1" else "other")))})
send({"type": "exec", "id": "1", "command": "echo exec-sees ${SVC_TOKEN:-unset}"})
r = json.loads(sys.stdin.readline())["value"]
send({"type": "output", "text": r["stdout"]})
`

func installSecretPlugin(t *testing.T, e *ptyEnv, name string, declare bool) {
	t.Helper()
	src := filepath.Join(filepath.Dir(e.home), "src", name)
	require.NoError(t, os.MkdirAll(src, 0o700))
	m := "[plugin]\nname = \"" + name + "\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"" + name + "\"\nbinary = \"p.py\"\n\n[capabilities]\nexec = true\n"
	if declare {
		m += "secrets = [\"SVC_TOKEN\"]\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(m), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "p.py"), []byte(secretPlugin), 0o755))
	out, code := e.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)
	if declare {
		assert.Contains(t, out, "secret=SVC_TOKEN")
	}
}

// A granted secret reaches its plugin's process only: not its commands, not another
// plugin, never the audit log; missing, the run is refused before it starts with an
// error naming the secret.
func TestSecretsByName(t *testing.T) {
	e := newPtyEnv(t, "")
	installSecretPlugin(t, e, "sec", true)
	installSecretPlugin(t, e, "other", false)

	out, code := e.run(t, "--ni", "sec")
	assert.Equal(t, 126, code, out)
	assert.Contains(t, out, "SVC_TOKEN")
	assert.Contains(t, out, "fledge secrets set SVC_TOKEN")
	assert.NotContains(t, out, "plugin-sees", "the plugin must not start")

	set := exec.Command(e.fledge, "secrets", "set", "SVC_TOKEN")
	set.Env, set.Dir, set.Stdin = e.env, e.work, strings.NewReader("value-from-store-9f3\n")
	b, err := set.CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.NotContains(t, string(b), "value-from-store-9f3")
	fi, err := os.Stat(filepath.Join(e.home, ".local", "state", "fledge", "secrets", "SVC_TOKEN"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	out, code = e.run(t, "--ni", "sec")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "plugin-sees store")
	assert.Contains(t, out, "exec-sees unset", "a command must not get its plugin's secret")

	out, code = e.run(t, "--ni", "other")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "plugin-sees unset", "another plugin must not get the secret")

	// The user's environment wins over the store.
	e.env = append(e.env, "SVC_TOKEN=value-from-env-7a1")
	out, code = e.run(t, "--ni", "sec")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "plugin-sees env")
	assert.Contains(t, out, "exec-sees unset")
	out, _ = e.run(t, "--ni", "other")
	assert.Contains(t, out, "plugin-sees unset", "an ungranted plugin must not get it from the environment either")

	log, err := os.ReadFile(filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"))
	require.NoError(t, err)
	assert.NotContains(t, string(log), "value-from-store-9f3")
	assert.NotContains(t, string(log), "value-from-env-7a1")
	assert.Contains(t, string(log), "secret=SVC_TOKEN", "the grant names the secret")
}
