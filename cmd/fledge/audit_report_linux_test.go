// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit/report"
	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/headless"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// hostilePlugin is a fledge-v1 plugin whose every word aims at the reviewer's browser: its
// command lines, cwd paths, DNS names and tool arguments carry script tags, attribute
// breakouts with onerror handlers, javascript: URLs, CSS escapes, RTL overrides and a
// megabyte string. Each payload, if it ran, would set document.title and fetch WATCH (a
// server the test watches).
const hostilePlugin = `#!/usr/bin/python3
import json, socket, struct, sys
W = open(__file__ + ".watch").read().strip()
P = [
  "<script>document.title='pwned';fetch('%s/script')</script>" % W,
  "\"><img src=x onerror=\"document.title='pwned';fetch('%s/img')\">" % W,
  "'><svg onload=fetch('%s/svg')>" % W,
  "javascript:fetch('%s/js')" % W,
  "</script><script>fetch('%s/close')</script><!--" % W,
  "</style><style>body{background:url(%s/css)}</style>" % W,
  "\\3c script\\3e fetch('%s/cssesc')\\3c /script\\3e" % W,
  "safe.txt\u202egpj.exe \u2066hidden\u2069 \x1b[31mred\x1b[0m \r overwrite",
]
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def ask(m):
    send(m)
    while True:
        r = json.loads(sys.stdin.readline())
        if r.get("id") == m["id"]:
            return r
init = json.loads(sys.stdin.readline())
if "--name" in " ".join(sys.argv):
    send({"type": "output", "text": "tool ran"})
    sys.exit(0)
for i, p in enumerate(P):
    ask({"type": "exec", "id": "x%d" % i, "command": "true " + json.dumps(p)})
    ask({"type": "exec", "id": "c%d" % i, "command": "true", "cwd": "../../../" + p})
ask({"type": "exec", "id": "big", "command": "true " + "A" * 1000000 + P[0]})
# DNS names fledge answers (network by destination): raw queries, any byte in a label.
try:
    ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
    for i, p in enumerate(P[:4] + [P[7]]):
        labels = [p.encode()[j:j+60] for j in range(0, len(p.encode()), 60)] + [b"evil", b"test"]
        q = struct.pack(">HHHHHH", 0x1000 + i, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l for l in labels) + b"\x00\x00\x01\x00\x01"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
        s.sendto(q, (ns, 53))
        try: s.recv(512)
        except OSError: pass
except Exception as e:
    send({"type": "output", "text": "dns: %s\n" % e})
send({"type": "output", "text": "done\n"})
`

const hostileManifest = `[plugin]
name = "hostile"
version = "6.6.6"
protocol = "fledge-v1"

[[commands]]
name = "hostile"
binary = "hostile.py"

[[commands]]
name = "greet"
binary = "hostile.py"

[[commands.args]]
name = "name"
type = "string"
required = true

[capabilities]
exec = true
`

// watcher is a local server that counts every request: a payload that ran would call it.
func watcher(t *testing.T) (*httptest.Server, *atomic.Int64, *[]string) {
	var hits atomic.Int64
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		paths = append(paths, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits, &paths
}

// hostileEnv installs and runs the hostile plugin through the CLI (confined as ever), and
// calls its tool with hostile arguments.
func hostileEnv(t *testing.T, watch string) *ptyEnv {
	t.Helper()
	e := newPtyEnv(t, "[audit]\ntool_argument_values = true\n")
	src := filepath.Join(filepath.Dir(e.home), "src", "hostile")
	require.NoError(t, os.MkdirAll(src, 0o700))
	manifest := hostileManifest
	if netstack.Supported() == nil {
		// Any destination granted gives the plugin its namespace and fledge's DNS answers.
		manifest += "network = [\"example.org:443\"]\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "hostile.py"), []byte(hostilePlugin), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "hostile.py.watch"), []byte(watch), 0o644))
	out, code := e.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)
	out, code = e.run(t, "--ni", "hostile")
	require.Equal(t, 0, code, "run: %s", out)
	require.Contains(t, out, "done")
	out, code = e.run(t, "tools", "call", "plugin_hostile_greet",
		"name=<script>fetch('"+watch+"/tool')</script>\"><img src=x onerror=fetch('"+watch+"/tool2')>\u202e")
	require.Equal(t, 0, code, "tools call: %s", out)
	return e
}

func openChromium(t *testing.T, ctx context.Context) *headless.Browser {
	t.Helper()
	bin := headless.Find()
	if bin == "" {
		testutil.SkipUnlessSupported(t, false, "no chromium (.ci/run installs it)")
	}
	b, err := headless.Start(ctx, bin, t.TempDir(), 1400, 1000)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

type pageSession struct {
	Session string
	Plugin  string
	Allow   int
	Deny    int
	Error   int
	Records int
}

// pageSessions reads the sessions table as the page shows it.
func pageSessions(t *testing.T, ctx context.Context, b *headless.Browser) []pageSession {
	var rows [][]string
	require.NoError(t, b.Eval(ctx, `Array.from(document.querySelectorAll("#sessions tr.sess")).map(tr => Array.from(tr.cells).map(c => c.textContent))`, &rows))
	var out []pageSession
	for _, r := range rows {
		n := func(s string) int { var v int; fmt.Sscan(strings.ReplaceAll(s, ",", ""), &v); return v }
		out = append(out, pageSession{Plugin: r[0], Session: r[1], Allow: n(r[4]), Deny: n(r[5]), Error: n(r[6]), Records: n(r[7])})
	}
	return out
}

func cliSessions(t *testing.T, e *ptyEnv) []pageSession {
	cmd := exec.Command(e.fledge, "audit", "sessions", "--json")
	cmd.Env, cmd.Dir = e.env, e.work
	out, err := cmd.Output()
	require.NoError(t, err)
	var ss []pageSession
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s struct {
			Session, Plugin, Version string
			Allow, Deny, Error       int
			Records                  int
		}
		require.NoError(t, json.Unmarshal([]byte(l), &s))
		ss = append(ss, pageSession{s.Session, s.Plugin + "@" + s.Version, s.Allow, s.Deny, s.Error, s.Records})
	}
	return ss
}

// A hostile plugin's records, in the report a reviewer opens: no script of theirs runs, no
// request is made (neither to the watched server nor anywhere), the title is fledge's, the
// page shows the sessions and counts audit sessions --json gives, the RTL override is
// shown, not applied, and the megabyte command is clipped with its length stated.
func TestAuditReportHostilePluginInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := openChromium(t, ctx)
	srv, hits, paths := watcher(t)
	e := hostileEnv(t, srv.URL)

	out := filepath.Join(e.work, "report.html")
	msg, code := e.run(t, "audit", "report", "--output", out)
	require.Equal(t, 0, code, msg)
	page, err := os.ReadFile(out)
	require.NoError(t, err)
	// Self-contained: nothing to fetch, the only scripts the data block and the page's own.
	assert.NotRegexp(t, regexp.MustCompile(`(?i)<(link|img|iframe|object|embed)\b|src=|@import|url\(`), string(page))
	assert.Equal(t, 2, strings.Count(string(page), "<script"))

	url := "file://" + out
	require.NoError(t, b.Navigate(ctx, url))
	require.NoError(t, b.WaitFor(ctx, `document.body.dataset.ready === "1"`))
	// Every session drawn in turn, every details block opened: each string reaches the DOM.
	var text string
	require.NoError(t, b.Eval(ctx, `(async () => {
		let text = "";
		const n = document.querySelectorAll("#sessions tr.sess").length;
		for (let i = 0; i < n; i++) {
			document.querySelectorAll("#sessions tr.sess")[i].click();
			document.querySelectorAll("#timeline .rec, #other .rec").forEach(r => r.click());
			await new Promise(r => setTimeout(r, 50));
			text += document.body.innerText;
		}
		return text })()`, &text))
	time.Sleep(500 * time.Millisecond)

	var title string
	require.NoError(t, b.Eval(ctx, `document.title`, &title))
	assert.Equal(t, report.Title, title)
	assert.Zero(t, hits.Load(), "requests to the watched server: %v", *paths)
	assert.Empty(t, b.Problems(url), "console errors or requests")
	var injected int
	require.NoError(t, b.Eval(ctx, `document.querySelectorAll("#app img, #app svg, #app script, #app style, #app iframe, [onerror], [onload]").length`, &injected))
	assert.Zero(t, injected, "elements from record text")
	// Shown as text, visibly (the page's text is not printed on failure: it is megabytes).
	shown := func(s, why string) { assert.True(t, strings.Contains(text, s), "the page shows %q (%s)", s, why) }
	shown("<script>document.title='pwned'", "a script tag, as text")
	shown(`"><img src=x onerror=`, "an attribute breakout, as text")
	shown("javascript:fetch(", "a javascript: URL, as text")
	shown(`\3c script\3e`, "a CSS escape, as text")
	shown("safe.txt⟦U+202E⟧gpj.exe ⟦U+2066⟧hidden⟦U+2069⟧", "bidi controls, visibly")
	shown("␛[31mred", "a terminal escape, visibly")
	assert.False(t, strings.ContainsAny(text, "\u202e\u2066\x1b"), "no control applied")
	assert.True(t, regexp.MustCompile(`…\[truncated: 10000[0-9]{2} bytes, sha256 [0-9a-f]{64}\]`).MatchString(text), "the megabyte command, cut with its full length stated")
	shown("/tool')", "the tool arguments")
	if netstack.Supported() == nil {
		shown("net_dns", "the DNS records")
		shown(".evil.test (DNS)", "refused names in the per-plugin list")
	}
	assert.Equal(t, cliSessions(t, e), pageSessions(t, ctx, b), "the sessions and counts of audit sessions --json")
}

// audit ui: loopback only, the token or nothing, GET and HEAD only, and a record written
// while a browser watches shows up on its page.
func TestAuditUIServesLiveLoopbackOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newPtyEnv(t, "")
	out, code := e.run(t, "--ni", "plugins", "install", "--yes", filepath.Join(filepath.Dir(e.home), "src", "ask"))
	require.Equal(t, 0, code, out)

	// Not loopback: refused before listening.
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0", "192.0.2.1:8080"} {
		out, code = e.run(t, "audit", "ui", "--listen", addr)
		assert.Equal(t, 2, code, "--listen %s: %s", addr, out)
		assert.Contains(t, out, "loopback address only", addr)
	}

	cmd := exec.Command(e.fledge, "audit", "ui")
	cmd.Env, cmd.Dir = e.env, e.work
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	m := regexp.MustCompile(`(http://127\.0\.0\.1:[0-9]+)/([0-9a-f]{32})/`).FindStringSubmatch(line)
	require.NotNil(t, m, line)
	base, token := m[1], m[2]
	go io.Copy(io.Discard, stdout)

	get := func(method, url string) (int, string) {
		req, err := http.NewRequest(method, url, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	code, body := get("GET", base+"/")
	assert.Equal(t, 404, code)
	assert.NotContains(t, body, "fledge audit report")
	code, _ = get("GET", base+"/"+strings.Repeat("0", 32)+"/")
	assert.Equal(t, 404, code, "a wrong token")
	code, _ = get("GET", base+"/"+token[:31]+"/")
	assert.Equal(t, 404, code, "a token cut short")
	for _, meth := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		code, body = get(meth, base+"/"+token+"/")
		assert.Equal(t, 405, code, meth)
		assert.NotContains(t, body, "fledge audit report", meth)
	}
	code, _ = get("HEAD", base+"/"+token+"/")
	assert.Equal(t, 200, code)
	code, body = get("GET", base+"/"+token+"/")
	assert.Equal(t, 200, code)
	assert.Contains(t, body, "<title>fledge audit report</title>")

	// A browser watches; a run of the plugin lands while it does.
	b := openChromium(t, ctx)
	url := base + "/" + token + "/"
	require.NoError(t, b.Navigate(ctx, url))
	require.NoError(t, b.WaitFor(ctx, `document.body.dataset.ready === "1"`))
	var before int
	require.NoError(t, b.Eval(ctx, `document.querySelectorAll("#sessions tr.sess").length`, &before))
	require.NoError(t, b.WaitFor(ctx, `document.getElementById("live").textContent.includes("live")`))
	out, code = e.run(t, "--ni", "ask")
	require.Equal(t, 0, code, out)
	require.NoError(t, b.WaitFor(ctx, fmt.Sprintf(`document.querySelectorAll("#sessions tr.sess").length === %d`, before+1)))
	want := cliSessions(t, e)
	require.NoError(t, b.WaitFor(ctx, fmt.Sprintf(`document.querySelector("#sessions tr.sess:last-child").cells[7].textContent === "%d"`, want[len(want)-1].Records)))
	assert.Equal(t, want, pageSessions(t, ctx, b), "the live page counts as audit sessions --json does")
	assert.Empty(t, b.Problems(url, base+"/"+token+"/events*"), "console errors or other requests")
}
