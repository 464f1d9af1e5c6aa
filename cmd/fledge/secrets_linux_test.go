// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/testutil"
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

// leakPlugin, granted SVC_TOKEN (a DNS-safe value in mixed case) and SVC_PASS (with
// characters URL and base64 encodings change), puts them in every text it hands fledge: a
// command line (raw, and encoded the usual ways), a working directory, a store key, a name
// it looks up through fledge's DNS, and a file it tries to open. It prints nothing of them
// itself (its own output is its business, not fledge's).
const leakPlugin = `#!/usr/bin/python3
import base64, binascii, json, os, socket, sys, urllib.parse
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
tok, pw = os.environ["SVC_TOKEN"], os.environ["SVC_PASS"]
n = 0
def ex(cmd, cwd=None):
    global n
    n += 1
    m = {"type": "exec", "id": str(n), "command": cmd}
    if cwd is not None:
        m["cwd"] = cwd
    send(m)
    r = json.loads(sys.stdin.readline())
    send({"type": "output", "text": "exec-%d %s\n" % (n, "ok" if r.get("value", {}).get("code") == 0 else "refused")})
for v in (tok, pw):
    b = v.encode()
    encs = [v, v.lower(), v.upper(), urllib.parse.quote_plus(v), urllib.parse.quote(v, safe=""),
            base64.b64encode(b).decode(), base64.urlsafe_b64encode(b).decode(),
            base64.b64encode(b"x:" + b).decode(), base64.b64encode(b"user1:" + b).decode(),
            base64.b64encode(b + b":").decode(), binascii.hexlify(b).decode(), binascii.hexlify(b).decode().upper()]
    ex("true " + " ".join("'%s'" % e for e in encs))
    ex("true", cwd=v)
    send({"type": "store", "key": "k-" + v, "value": "x"})
    for f in (lambda p: open(p, "w"), os.mkdir):
        try:
            f("/var/" + v.replace("/", "_"))
        except OSError:
            pass
# Through fledge's DNS: as it is, split across two labels, in hex and in base32.
for name in (tok, tok[:9] + "." + tok[9:], binascii.hexlify(tok.encode()).decode(),
             base64.b32encode(tok.encode()).decode().rstrip("=").lower()):
    try:
        socket.getaddrinfo(name + ".example.test", 443)
    except OSError:
        pass
# A response to no request: fledge warns, quoting its id.
send({"type": "response", "id": tok, "value": {}})
send({"type": "output", "text": "leak-done\n"})
`

// A plugin holding a secret cannot get its value, or its common encodings, into the audit
// log, `fledge audit show`, `fledge plugins learn` or fledge's own messages by handing it to
// fledge as text: every occurrence reads [secret:NAME] (the value in a command line, a
// working directory, a store key, a name looked up through fledge's DNS, a path the kernel
// refused, a request id fledge warns about; lowercased, uppercased, URL-escaped, hex,
// base64 of the value and of "x:VALUE", "user1:VALUE", "VALUE:").
func TestSecretValuesRedacted(t *testing.T) {
	if err := netstack.Supported(); err != nil {
		testutil.SkipUnlessSupported(t, false, "network by destination: "+err.Error())
	}
	e := newPtyEnv(t, "")
	const tok, pw = "Tok3n-Value-9f3XyZqW", "p@ss/w0rd+Secret=x7?&"
	src := filepath.Join(filepath.Dir(e.home), "src", "leak")
	require.NoError(t, os.MkdirAll(src, 0o700))
	m := "[plugin]\nname = \"leak\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"leak\"\nbinary = \"p.py\"\n\n" +
		"[capabilities]\nexec = true\nstore = true\nnetwork = [\"localhost:9\"]\nsecrets = [\"SVC_TOKEN\", \"SVC_PASS\"]\n"
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(m), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "p.py"), []byte(leakPlugin), 0o755))
	out, code := e.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)
	e.env = append(e.env, "SVC_TOKEN="+tok, "SVC_PASS="+pw)

	run, code := e.run(t, "--ni", "leak")
	require.Equal(t, 0, code, run)
	require.Contains(t, run, "leak-done", "the plugin ran to its end")
	learn, _ := e.run(t, "--ni", "plugins", "learn", "leak")
	show, _ := e.run(t, "audit", "show")
	showJSON, _ := e.run(t, "audit", "show", "--json")
	log, err := os.ReadFile(filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"))
	require.NoError(t, err)
	// The records are there, with the value replaced.
	for _, want := range []string{"[secret:SVC_TOKEN]", "[secret:SVC_PASS]", `"event":"net_dns"`} {
		assert.True(t, strings.Contains(string(log), want), "the audit log has no %s", want)
	}
	assert.Contains(t, run, "orphaned response (id \"[secret:SVC_TOKEN]\")", "fledge's warning quotes the plugin's text, redacted")

	b32 := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(tok)))
	// The four names, each asked (A, AAAA) by the run and by learn's.
	assert.GreaterOrEqual(t, strings.Count(string(log), `"host":"[secret:SVC_TOKEN].example.test"`), 8, "the names fledge's DNS was asked")
	for _, v := range []string{tok, pw} {
		b := []byte(v)
		encs := map[string]string{
			"split in a name": strings.ToLower(tok[:9] + "." + tok[9:]), "base32 in a name": b32,
			"value": v, "lowercased": strings.ToLower(v), "uppercased": strings.ToUpper(v),
			"query-escaped": url.QueryEscape(v), "path-escaped": url.PathEscape(v),
			"base64": base64.StdEncoding.EncodeToString(b), "base64url": base64.URLEncoding.EncodeToString(b),
			"base64 x:value":     base64.StdEncoding.EncodeToString(append([]byte("x:"), b...)),
			"base64 user1:value": base64.StdEncoding.EncodeToString(append([]byte("user1:"), b...)),
			"base64 value:":      base64.StdEncoding.EncodeToString(append(b, ':')),
			"hex":                hex.EncodeToString(b), "HEX": strings.ToUpper(hex.EncodeToString(b)),
		}
		for what, enc := range encs {
			for where, text := range map[string]string{"audit log": string(log), "audit show": show, "audit show --json": showJSON,
				"plugins learn": learn, "fledge's run output": run} {
				if i := strings.Index(text, enc); i >= 0 {
					t.Errorf("the %s of a secret in %s: ...%s...", what, where, text[max(0, i-80):min(len(text), i+len(enc)+40)])
				}
			}
		}
	}
}

// A secret too short to tell apart from other text (under 8 bytes) cannot be kept out of
// the records without shredding them: `secrets set` refuses it, and a run whose granted
// secret is that short (from the environment) is refused before the plugin starts, naming
// the secret and the minimum, never the value.
func TestSecretTooShortRefused(t *testing.T) {
	e := newPtyEnv(t, "")
	installSecretPlugin(t, e, "sec", true)

	set := exec.Command(e.fledge, "secrets", "set", "SVC_TOKEN")
	set.Env, set.Dir, set.Stdin = e.env, e.work, strings.NewReader("q7z\n")
	b, err := set.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", b)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(b), "at least 8")
	assert.NotContains(t, string(b), "q7z")
	_, err = os.Stat(filepath.Join(e.home, ".local", "state", "fledge", "secrets", "SVC_TOKEN"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the short value is not stored")

	e.env = append(e.env, "SVC_TOKEN=q7z")
	out, code := e.run(t, "--ni", "sec")
	assert.Equal(t, 126, code, out)
	assert.Contains(t, out, "SVC_TOKEN has 3 bytes, at least 8")
	assert.NotContains(t, out, "plugin-sees", "the plugin must not start")
	assert.NotContains(t, out, "q7z")
	log, err := os.ReadFile(filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"))
	require.NoError(t, err)
	assert.Contains(t, string(log), `"event":"plugin_start","decision":"deny"`)
	assert.NotContains(t, string(log), "q7z")
}
