// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// netPlugin is an ordinary fledge-v1 plugin that knows nothing of fledge's network: it
// fetches with python urllib, a raw socket, and asks for commands that use curl and
// node's fetch, each to a granted and to an ungranted destination, and reports what
// happened on one line each.
const netPlugin = `#!/usr/bin/python3
import json, socket, sys, urllib.request
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def out(s):
    send({"type": "output", "text": s + "\n"})
ok, bad, loopname = [int(x) for x in open(__file__ + ".ports").read().split()[:2]] + [open(__file__ + ".ports").read().split()[2]]
def url(p, host="localhost"):
    return "http://%s:%d/" % (host, p)
def tryurl(label, u):
    try:
        out("%s ok %s" % (label, urllib.request.urlopen(u, timeout=5).read().decode()))
    except Exception as e:
        out("%s fail %s" % (label, type(e).__name__))
tryurl("plugin-urllib-granted", url(ok))
tryurl("plugin-urllib-port", url(bad))
tryurl("plugin-urllib-name", url(ok, "evil.test"))
try:
    s = socket.create_connection(("192.0.2.1", 80), timeout=5); out("plugin-raw-addr ok")
except OSError as e:
    out("plugin-raw-addr fail %s" % type(e).__name__)
n = 0
def ex(label, cmd):
    global n
    n += 1
    send({"type": "exec", "id": str(n), "command": cmd})
    r = json.loads(sys.stdin.readline())["value"]
    out("%s code=%d out=%s" % (label, r["code"], r["stdout"].strip()))
ex("exec-curl-granted", "curl -sS --max-time 5 " + url(ok))
ex("exec-curl-port", "curl -sS --max-time 5 " + url(bad))
ex("exec-node-granted", "node -e 'fetch(process.argv[1]).then(r=>r.text()).then(t=>console.log(t)).catch(e=>{console.log(String(e.cause||e));process.exit(3)})' " + url(ok))
ex("exec-getent-ungranted", "getent ahostsv4 evil.test")
`

type netEnv struct {
	*ptyEnv
	okHits, badHits *atomic.Int64
	ok, bad         int
}

func newNetEnv(t *testing.T, network string) *netEnv {
	t.Helper()
	if err := netstack.Supported(); err != nil {
		testutil.SkipUnlessSupported(t, false, "network by destination: "+err.Error())
	}
	for _, p := range []string{"curl", "node", "/usr/bin/python3", "getent"} {
		if _, err := exec.LookPath(p); err != nil {
			testutil.SkipUnlessSupported(t, false, p+" not installed")
		}
	}
	ne := &netEnv{okHits: &atomic.Int64{}, badHits: &atomic.Int64{}}
	srv := func(body string, hits *atomic.Int64) int {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(s.Close)
		p, _ := strconv.Atoi(s.URL[strings.LastIndex(s.URL, ":")+1:])
		return p
	}
	ne.ok, ne.bad = srv("granted-body", ne.okHits), srv("other-body", ne.badHits)
	ne.ptyEnv = newPtyEnv(t, "")
	src := filepath.Join(filepath.Dir(ne.home), "src", "netp")
	require.NoError(t, os.MkdirAll(src, 0o700))
	manifest := "[plugin]\nname = \"netp\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"netp\"\nbinary = \"netp.py\"\n\n[capabilities]\nexec = true\n"
	network = strings.ReplaceAll(network, "OK", strconv.Itoa(ne.ok))
	if network != "" {
		manifest += "network = " + network + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "netp.py"), []byte(netPlugin), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "netp.py.ports"), fmt.Appendf(nil, "%d %d -\n", ne.ok, ne.bad), 0o644))
	out, code := ne.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)
	return ne
}

func lines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			m[k] = v
		}
	}
	return m
}

// A plugin granted one destination reaches it (python urllib in the plugin process; curl
// and node fetch in its commands, without any proxy setting) and nothing else: another
// port, an ungranted name (not even resolved), an address literal; the audit log has the
// allow and the deny records. (A granted name resolving to loopback: the engine's tests,
// which control the host-side resolver.)
func TestEgressThroughCLI(t *testing.T) {
	e := newNetEnv(t, `["localhost:OK"]`)
	out, code := e.run(t, "--ni", "netp")
	require.Equal(t, 0, code, out)
	l := lines(out)
	assert.Equal(t, "ok granted-body", l["plugin-urllib-granted"], out)
	assert.Contains(t, l["plugin-urllib-port"], "fail", out)
	assert.Contains(t, l["plugin-urllib-name"], "fail", out)
	assert.Contains(t, l["plugin-raw-addr"], "fail", out)
	assert.Equal(t, "code=0 out=granted-body", l["exec-curl-granted"], out)
	assert.NotContains(t, l["exec-curl-port"], "code=0", out)
	assert.Equal(t, "code=0 out=granted-body", l["exec-node-granted"], out)
	assert.NotContains(t, l["exec-getent-ungranted"], "code=0", out)
	assert.Equal(t, int64(3), e.okHits.Load(), "plugin urllib, curl and node reached the granted port")
	assert.Equal(t, int64(0), e.badHits.Load(), "nothing reached the ungranted port")

	recs, _ := e.run(t, "audit", "show", "--json")
	type rec struct {
		Event    string         `json:"event"`
		Decision string         `json:"decision"`
		Details  map[string]any `json:"details"`
	}
	var got []rec
	for _, line := range strings.Split(strings.TrimSpace(recs), "\n") {
		var r rec
		if json.Unmarshal([]byte(line), &r) == nil {
			got = append(got, r)
		}
	}
	has := func(event, decision, host string, port int, why string) bool {
		for _, r := range got {
			if r.Event == event && r.Decision == decision && (host == "" || r.Details["host"] == host) &&
				(port == 0 || r.Details["port"] == float64(port)) && (why == "" || r.Details["why"] == why) {
				return true
			}
		}
		return false
	}
	assert.True(t, has("net_connect", "allow", "localhost", e.ok, "granted"), "allow record:\n%s", recs)
	assert.True(t, has("net_close", "allow", "localhost", e.ok, ""), "close record:\n%s", recs)
	assert.True(t, has("net_dns", "deny", "evil.test", 0, "not_granted"), "dns deny record:\n%s", recs)
	assert.True(t, has("net_connect", "deny", "", 80, "not_granted"), "address deny record:\n%s", recs)
	filtered, _ := e.run(t, "audit", "show", "--event", "net_connect")
	assert.Contains(t, filtered, "net_connect")
	assert.NotContains(t, filtered, "exec_decision")
}

// A plugin granted no network cannot connect, from its process or from its commands (it
// used to: commands had the whole network by default whatever the plugin was granted).
func TestEgressNoGrantNoNetwork(t *testing.T) {
	e := newNetEnv(t, "")
	out, code := e.run(t, "--ni", "netp")
	require.Equal(t, 0, code, out)
	l := lines(out)
	assert.Contains(t, l["plugin-urllib-granted"], "fail", out)
	assert.NotContains(t, l["exec-curl-granted"], "code=0", out)
	assert.NotContains(t, l["exec-node-granted"], "code=0 out=granted-body", out)
	assert.Equal(t, int64(0), e.okHits.Load()+e.badHits.Load(), "a plugin without network reached the host")
	info, _ := e.run(t, "plugins", "info", "netp")
	assert.Contains(t, info, "network (plugin and its commands): none")
}

// [sandbox] network = "allow" is the user's override: every run says so, and the log too.
func TestNetworkAllowOverrideAnnounced(t *testing.T) {
	e := newPtyEnv(t, "[sandbox]\nnetwork = \"allow\"\n")
	out, _ := e.run(t, "--ni", "ask", "x")
	assert.Contains(t, out, `network = "allow"`, out)
	assert.Contains(t, out, "whole network", out)
	recs, _ := e.run(t, "audit", "show", "--json", "--event", "sandbox_degraded")
	assert.Contains(t, recs, `"network_override":"allow"`)
	doc, _ := e.run(t, "doctor")
	assert.Contains(t, doc, `network = "allow"`)
}
