// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// hardened is an ordinary user's fledge on a hardened host, simulated exactly: fledge runs
// in a user namespace whose user.max_user_namespaces is 0, as uid 65534 with no
// capabilities (the limit is set inside the new namespace, then the process drops to the
// uid before it execs fledge), so fledge can make no namespace of any kind.
type hardened struct {
	base, exe, home, work string
	env                   []string
}

func newHardened(t *testing.T) *hardened {
	t.Helper()
	// Mapping the ids 0-65535 into the simulation's user namespace needs root outside.
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "simulating a hardened host maps uids 0-65535: needs root")
	if _, err := exec.LookPath("setpriv"); err != nil {
		testutil.SkipUnlessSupported(t, false, "setpriv (util-linux) not installed")
	}
	base, err := os.MkdirTemp("", "fledge-hardened-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	h := &hardened{base: base, exe: filepath.Join(base, "fledge"), home: filepath.Join(base, "home"), work: filepath.Join(base, "work")}
	require.NoError(t, os.WriteFile(h.exe, data, 0o755)) // named fledge: runs fledge's main
	for _, d := range []string{h.home, h.work} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(h.work, "fledge.toml"), nil, 0o644)) // a project
	h.env = []string{"HOME=" + h.home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "NO_COLOR=1",
		"FLEDGE_CONFIG_DIR=" + filepath.Join(h.home, ".config", "fledge"),
		"FLEDGE_AUDIT_LOG=" + filepath.Join(h.home, "audit.jsonl")}
	return h
}

// chown hands the tree at p to the ordinary user.
func (h *hardened) chown(t *testing.T, p string) {
	t.Helper()
	require.NoError(t, filepath.Walk(p, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	}))
}

// cmd is fledge with args on the simulated host.
func (h *hardened) cmd(args ...string) *exec.Cmd {
	script := `echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all "$@"`
	c := exec.Command("/bin/sh", append([]string{"-c", script, "sh", h.exe}, args...)...)
	c.Dir, c.Env = h.work, h.env
	c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappingsEnableSetgroups: true}
	return c
}

// run runs fledge with args to its end (bounded) and returns its output and status.
func (h *hardened) run(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	c := h.cmd(args...)
	c.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	require.NoError(t, c.Start())
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = c.Process.Kill()
		<-done
		t.Fatalf("fledge %v did not end:\n%s", args, out.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), 0
}

// records are the audit log's records.
func (h *hardened) records(t *testing.T) ([]auditRec, string) {
	t.Helper()
	raw, code := h.run(t, "", "audit", "show", "--json")
	require.Equal(t, 0, code, raw)
	var got []auditRec
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		var r auditRec
		if json.Unmarshal([]byte(line), &r) == nil {
			got = append(got, r)
		}
	}
	return got, raw
}

// proxyPlugin is a fledge-v1 plugin on a host where fledge can make no network namespace:
// it and its commands reach the granted destinations only through the session's proxy
// (python urllib, curl over HTTP and SOCKS5, node with undici's EnvHttpProxyAgent), and
// fail closed doing anything else (a raw connect, UDP, TCP Fast Open, curl and node
// ignoring the proxy, a DNS lookup). It then says its proxy's port and its data dir, and
// waits for the test to have tried the proxy from outside.
const proxyPlugin = `#!/usr/bin/python3
import json, os, socket, sys, time, urllib.request, urllib.parse
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def out(s):
    send({"type": "output", "text": s + "\n"})
cfg = json.load(open(__file__ + ".json"))
ok, bad, tls, ssrf, undici = cfg["ok"], cfg["bad"], cfg["tls"], cfg["ssrf"], cfg["undici"]
def get(label, u, h={}):
    try:
        out("%s ok %s" % (label, urllib.request.urlopen(urllib.request.Request(u, headers=h), timeout=10).read().decode()))
    except Exception as e:
        out("%s fail %s" % (label, type(e).__name__))
def sock(label, f):
    try:
        f(); out("%s ok" % label)
    except OSError as e:
        out("%s fail %s" % (label, type(e).__name__))
get("plugin-urllib-granted", "http://localhost:%d/" % ok)
get("plugin-urllib-addr", "http://127.0.0.1:%d/" % ok)
get("plugin-urllib-port", "http://localhost:%d/" % bad)
get("plugin-urllib-name", "http://evil.test:%d/" % ok)
if ssrf:
    get("plugin-urllib-ssrf", "http://%s:%d/" % (ssrf, ok))
get("plugin-https-secret", "https://localhost:%d/from-plugin" % tls, {"Authorization": "Bearer " + os.environ.get("API_TOKEN", "")})
sock("plugin-raw", lambda: socket.create_connection(("127.0.0.1", ok), timeout=5))
sock("plugin-raw-other", lambda: socket.create_connection(("192.0.2.1", 80), timeout=5))
sock("plugin-udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
sock("plugin-udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
sock("plugin-sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
sock("plugin-fastopen", lambda: socket.socket().sendto(b"GET / HTTP/1.0\r\n\r\n", 0x20000000, ("127.0.0.1", ok)))
n = 0
def ex(label, cmd):
    global n
    n += 1
    send({"type": "exec", "id": str(n), "command": cmd})
    r = json.loads(sys.stdin.readline())["value"]
    err = "" if r["code"] == 0 else " err=" + (r.get("stderr") or "").strip().replace("\n", " | ")[-300:]
    out("%s code=%d out=%s%s" % (label, r["code"], r["stdout"].strip(), err))
ex("exec-curl-granted", "curl -sS --max-time 10 http://localhost:%d/" % ok)
ex("exec-curl-socks", "curl -sS --max-time 10 --proxy \"$ALL_PROXY\" http://localhost:%d/" % ok)
ex("exec-curl-noproxy", "curl -sS --max-time 5 --noproxy '*' http://localhost:%d/" % ok)
ex("exec-curl-port", "curl -sS --max-time 10 http://localhost:%d/" % bad)
ex("exec-curl-secret", "curl -sS --max-time 10 -H \"Authorization: Bearer $API_TOKEN\" https://localhost:%d/from-exec" % tls)
if undici:
    ex("exec-node-proxy", "node -e 'const u=require(process.argv[1]); u.fetch(process.argv[2],{dispatcher:new u.EnvHttpProxyAgent()}).then(r=>r.text()).then(t=>console.log(t)).catch(e=>{console.log(String(e.cause||e));process.exit(3)})' %s http://localhost:%d/" % (undici, ok))
ex("exec-node-fetch", "node -e 'fetch(process.argv[1]).then(r=>r.text()).then(t=>console.log(t)).catch(e=>{console.log(String(e.cause||e));process.exit(3)})' http://localhost:%d/" % ok)
ex("exec-getent", "getent ahostsv4 localhost.test; getent ahostsv4 example.com")
out("proxy-port %d" % urllib.parse.urlsplit(os.environ["HTTP_PROXY"]).port)
out("no-proxy [%s]" % os.environ.get("NO_PROXY", "unset"))
out("data-dir " + os.environ["FLEDGE_DATA_DIR"])
for i in range(600):
    if os.path.exists(os.path.join(os.environ["FLEDGE_DATA_DIR"], "go")):
        break
    time.sleep(0.05)
# Landlock's rule is a port: the proxy's port at another address is another destination.
pp = urllib.parse.urlsplit(os.environ["HTTP_PROXY"]).port
sock("plugin-proxy-port-elsewhere", lambda: socket.create_connection(("127.0.0.2", pp), timeout=5))
sock("plugin-proxy-port-v6", lambda: socket.create_connection(("::1", pp), timeout=5))
ex("exec-proxy-port-elsewhere", "curl -sS --max-time 5 --noproxy '*' http://127.0.0.2:%d/" % pp)
out("done")
`

// otherPlugin is a second plugin, in a session of its own, that tries the first session's
// proxy with its own session's credential.
const otherPlugin = `#!/usr/bin/python3
import base64, json, os, socket, sys, urllib.parse
json.loads(sys.stdin.readline())
def out(s):
    sys.stdout.write(json.dumps({"type": "output", "text": s + "\n"}) + "\n"); sys.stdout.flush()
port, ok = [int(x) for x in open(__file__ + ".ports").read().split()]
u = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
out("other-credential %s:%s" % (u.username, u.password))
try:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    cred = base64.b64encode(("%s:%s" % (u.username, u.password)).encode()).decode()
    s.sendall(("CONNECT localhost:%d HTTP/1.1\r\nHost: localhost:%d\r\nProxy-Authorization: Basic %s\r\n\r\n" % (ok, ok, cred)).encode())
    out("other-connect ok " + s.recv(100).decode().split("\r\n")[0])
except OSError as e:
    out("other-connect fail %s" % type(e).__name__)
`

// TestEgressViaProxyOnHardenedHost: an ordinary user's fledge where no namespace can be
// made keeps network by destination, through the session's proxy: curl (HTTP and SOCKS5),
// python urllib and node (undici's EnvHttpProxyAgent) reach the granted loopback
// destination; a bound secret is put into HTTPS requests (the session CA) from the plugin
// and its command; a raw connect, UDP, SCTP, TCP Fast Open, curl and node ignoring the
// proxy and DNS fail closed; an ungranted port and name and a granted name that resolves
// to a private address are refused and recorded; a second plugin's session cannot reach
// the first one's proxy, nor can a local program without the session's credential (or
// with another session's); doctor says network by destination is enforced, via the proxy.
func TestEgressViaProxyOnHardenedHost(t *testing.T) {
	for _, p := range []string{"curl", "node", "/usr/bin/python3", "getent"} {
		if _, err := exec.LookPath(p); err != nil {
			testutil.SkipUnlessSupported(t, false, p+" not installed")
		}
	}
	h := newHardened(t)
	var okHits, badHits atomic.Int64
	srv := func(body string, hits *atomic.Int64) int {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(s.Close)
		return s.Listener.Addr().(*net.TCPAddr).Port
	}
	ok, bad := srv("granted-body", &okHits), srv("other-body", &badHits)
	// The bound secret's destination: HTTPS on localhost, its certificate from a test CA
	// fledge trusts (SSL_CERT_FILE, which Go's and the plugin's trust stores read).
	var gotAuth []string
	tlsPort, caFile := localTLSServer(t, h.base, func(w http.ResponseWriter, r *http.Request) {
		gotAuth = append(gotAuth, r.URL.Path+" "+r.Header.Get("Authorization"))
		fmt.Fprintf(w, "auth-ok=%v path=%s", r.Header.Get("Authorization") == "Bearer "+boundValue, r.URL.Path)
	})
	h.env = append(h.env, "SSL_CERT_FILE="+caFile)
	// A granted name that resolves to the host itself: the SSRF guard refuses it.
	ssrf := ""
	if hn, err := os.Hostname(); err == nil {
		if addrs, err := net.LookupHost(hn); err == nil && len(addrs) > 0 {
			if a, err := netip.ParseAddr(addrs[0]); err == nil && egress.Special(a) && hn != "localhost" {
				ssrf = hn
			}
		}
	}
	// The plugin's commands read their project (the work dir): undici's copy there.
	undici := undiciPath(t)
	if undici != "" {
		dst := filepath.Join(h.work, "node_modules", "undici")
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		b, err := exec.Command("cp", "-a", undici, dst).CombinedOutput()
		require.NoError(t, err, "%s", b)
		undici = dst
	}

	// doctor: no namespace of any kind, network by destination enforced via the proxy.
	doc, code := h.run(t, "", "doctor", "--json")
	require.Equal(t, 0, code, doc)
	var rep struct {
		Sandbox struct {
			Egress  string `json:"network_egress"`
			NetDeny string `json:"network_deny"`
			UserNS  bool   `json:"user_namespaces"`
			View    string `json:"filesystem_view"`
		} `json:"sandbox"`
		Root bool `json:"root"`
	}
	require.NoError(t, json.Unmarshal([]byte(doc), &rep), doc)
	require.False(t, rep.Root)
	require.False(t, rep.Sandbox.UserNS, "the simulation allows no user namespace")
	require.Equal(t, "none", rep.Sandbox.View)
	if strings.HasPrefix(rep.Sandbox.Egress, "none") {
		testutil.SkipUnlessSupported(t, false, "network by destination via the proxy: "+rep.Sandbox.Egress)
	}
	require.True(t, strings.HasPrefix(rep.Sandbox.Egress, "proxy"), rep.Sandbox.Egress)
	assert.Contains(t, rep.Sandbox.NetDeny, "seccomp-tcp-only")
	text, _ := h.run(t, "", "doctor")
	assert.Contains(t, text, "network by destination: enforced via the session's proxy", text)

	src := filepath.Join(h.base, "src")
	grant := fmt.Sprintf("\"localhost:%d\"", ok)
	if ssrf != "" {
		grant += fmt.Sprintf(", \"%s:%d\"", ssrf, ok)
	}
	manifest := func(name, bin, network, secrets string) string {
		return fmt.Sprintf("[plugin]\nname = \"%s\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"%s\"\nbinary = \"%s\"\n\n"+
			"[capabilities]\nexec = true\nnetwork = [%s]\nsecrets = [%s]\n", name, name, bin, network, secrets)
	}
	pp, op := filepath.Join(src, "proxyp"), filepath.Join(src, "otherp")
	for _, d := range []string{pp, op} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(pp, "plugin.toml"), []byte(manifest("proxyp", "p.py", grant, fmt.Sprintf("\"API_TOKEN@localhost:%d\"", tlsPort))), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pp, "p.py"), []byte(proxyPlugin), 0o755))
	cfg, _ := json.Marshal(map[string]any{"ok": ok, "bad": bad, "tls": tlsPort, "ssrf": ssrf, "undici": undici})
	require.NoError(t, os.WriteFile(filepath.Join(pp, "p.py.json"), cfg, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(op, "plugin.toml"), []byte(manifest("otherp", "o.py", fmt.Sprintf("\"localhost:%d\"", ok), "")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(op, "o.py"), []byte(otherPlugin), 0o755))
	h.chown(t, h.base)
	for _, p := range []string{pp, op} {
		out, code := h.run(t, "", "--ni", "plugins", "install", "--yes", p)
		require.Equal(t, 0, code, "install: %s", out)
	}
	out, code := h.run(t, boundValue+"\n", "secrets", "set", "API_TOKEN")
	require.Equal(t, 0, code, out)

	// The first session runs until the test has tried its proxy from outside.
	c := h.cmd("--ni", "proxyp")
	pr, pw := io.Pipe()
	c.Stdout, c.Stderr = pw, pw
	require.NoError(t, c.Start())
	waited := make(chan error, 1)
	go func() { err := c.Wait(); pw.Close(); waited <- err }()
	t.Cleanup(func() { _ = c.Process.Kill() })
	var res strings.Builder
	sc := bufio.NewScanner(pr)
	var proxyPort int
	var dataDir string
	deadline := time.AfterFunc(2*time.Minute, func() { _ = c.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		res.WriteString(sc.Text() + "\n")
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "proxy-port "); ok {
			proxyPort, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "data-dir "); ok {
			dataDir = v
			break
		}
	}
	require.NotZero(t, proxyPort, res.String())
	proxyAddr := "127.0.0.1:" + strconv.Itoa(proxyPort)
	// Listeners on the proxy's port at other addresses: a run may reach none of them.
	var elsewhere atomic.Int64
	for _, a := range []string{"127.0.0.2", "[::1]"} {
		ln, err := net.Listen("tcp", a+":"+strconv.Itoa(proxyPort))
		if err != nil {
			t.Logf("no listener at %s: %v", a, err)
			continue
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				elsewhere.Add(1)
				c.Close()
			}
		}()
	}

	// A second plugin's session: its own credential, and no way to the first proxy's port.
	require.NoError(t, os.WriteFile(filepath.Join(h.home, "ports"), nil, 0o644))
	installed := installedDir(t, h, "otherp")
	require.NoError(t, os.WriteFile(filepath.Join(installed, "o.py.ports"), fmt.Appendf(nil, "%d %d\n", proxyPort, ok), 0o644))
	other, code := h.run(t, "", "--ni", "otherp")
	require.Equal(t, 0, code, other)
	ol := lines(other)
	assert.Contains(t, ol["other-connect"], "fail PermissionError", "Landlock: the other session reaches only its own proxy's port:\n%s", other)
	otherCred := ol["other-credential"]
	require.NotEmpty(t, otherCred, other)

	// Any local program: without the session's credential, with the other session's, with
	// a SOCKS5 password guess: refused before anything is decided or dialled.
	// A program of the same user (uid 65534, unconfined) gets as far as the credential.
	assert.Equal(t, "HTTP/1.1 407 Proxy Authentication Required", sameUserStatus(t, proxyPort, ""), "no credential")
	assert.Equal(t, "HTTP/1.1 407 Proxy Authentication Required", sameUserStatus(t, proxyPort, otherCred), "another session's credential")
	// Another user's program (this test, root) not even that far: closed at once.
	assert.Equal(t, "", proxyStatus(t, proxyAddr, otherCred), "another user's program")
	assert.Equal(t, "", proxyStatus(t, proxyAddr, ""), "another user's program")
	before := okHits.Load()

	require.NoError(t, os.WriteFile(filepath.Join(dataDir, "go"), nil, 0o644))
	for sc.Scan() {
		res.WriteString(sc.Text() + "\n")
	}
	require.NoError(t, <-waited, res.String())
	t.Logf("plugin run:\n%s", res.String())
	l := lines(res.String())
	// One honest line for the degraded run: what is missing, why, the fix, where the detail is.
	var warns []string
	for _, w := range strings.Split(res.String(), "\n") {
		if strings.Contains(w, "warning:") {
			warns = append(warns, w)
		}
	}
	require.Len(t, warns, 1, "one warning line:\n%s", res.String())
	assert.Contains(t, warns[0], "no private filesystem view, pid and IPC namespaces (no user namespaces)")
	assert.Contains(t, warns[0], "no memory/pids/cpu limits (no writable cgroup)")
	assert.Contains(t, warns[0], "fix: allow unprivileged user namespaces")
	assert.Contains(t, warns[0], "'fledge doctor' has the detail")
	assert.NotContains(t, warns[0], "network by destination", "network by destination is enforced here")
	assert.Equal(t, "ok granted-body", l["plugin-urllib-granted"])
	assert.Equal(t, "ok granted-body", l["plugin-urllib-addr"], "127.0.0.1 as the namespace's loopback serves it")
	assert.Equal(t, "fail HTTPError", l["plugin-urllib-port"])
	assert.Equal(t, "fail HTTPError", l["plugin-urllib-name"])
	if ssrf != "" {
		assert.Equal(t, "fail HTTPError", l["plugin-urllib-ssrf"])
	}
	assert.Equal(t, "ok auth-ok=true path=/from-plugin", l["plugin-https-secret"])
	assert.Equal(t, "fail PermissionError", l["plugin-raw"], "a connect past the proxy")
	assert.Equal(t, "fail PermissionError", l["plugin-raw-other"])
	assert.Equal(t, "fail PermissionError", l["plugin-udp"])
	assert.Equal(t, "fail PermissionError", l["plugin-udp6"])
	assert.Equal(t, "fail PermissionError", l["plugin-sctp"])
	assert.Equal(t, "fail PermissionError", l["plugin-fastopen"], "TCP Fast Open connects past Landlock's connect hook")
	assert.Equal(t, "code=0 out=granted-body", l["exec-curl-granted"], res.String())
	assert.Equal(t, "code=0 out=granted-body", l["exec-curl-socks"])
	assert.NotContains(t, l["exec-curl-noproxy"], "code=0")
	assert.NotContains(t, l["exec-curl-port"], "granted-body")
	assert.NotContains(t, l["exec-curl-port"], "other-body")
	assert.Equal(t, "code=0 out=auth-ok=true path=/from-exec", l["exec-curl-secret"])
	if undici != "" {
		assert.Equal(t, "code=0 out=granted-body", l["exec-node-proxy"])
	}
	assert.NotContains(t, l["exec-node-fetch"], "code=0", "node's fetch ignores the proxy variables: it reaches nothing")
	assert.NotContains(t, l["exec-getent"], "code=0")
	assert.Equal(t, "[]", l["no-proxy"], "a user's NO_PROXY does not send programs past the proxy")
	assert.Equal(t, "", l["done"])
	assert.Equal(t, "fail PermissionError", l["plugin-proxy-port-elsewhere"], "the proxy's port at another address")
	assert.Contains(t, l["plugin-proxy-port-v6"], "fail")
	assert.NotContains(t, l["exec-proxy-port-elsewhere"], "code=0")
	assert.Zero(t, elsewhere.Load(), "a run reached the proxy's port at another address")
	assert.Zero(t, badHits.Load(), "nothing reached the ungranted port")
	assert.Equal(t, before, okHits.Load(), "nothing reached the destination from outside the session")
	assert.NotContains(t, res.String(), boundValue)
	for _, a := range gotAuth {
		assert.True(t, strings.HasSuffix(a, "Bearer "+boundValue), a)
	}

	recs, raw := h.records(t)
	has := func(event, decision, host string, port int, why string) bool {
		for _, r := range recs {
			if r.Event == event && r.Decision == decision && (host == "" || r.Details["host"] == host) &&
				(port == 0 || r.Details["port"] == float64(port)) && (why == "" || r.Details["why"] == why) {
				return true
			}
		}
		return false
	}
	assert.True(t, has("net_connect", "allow", "localhost", ok, "granted"), "allow record:\n%s", raw)
	assert.True(t, has("net_close", "allow", "localhost", ok, ""), "close record")
	assert.True(t, has("net_connect", "deny", "localhost", bad, "not_granted"), "ungranted port record")
	assert.True(t, has("net_connect", "deny", "evil.test", ok, "not_granted"), "ungranted name record")
	if ssrf != "" {
		assert.True(t, has("net_connect", "deny", ssrf, ok, "private_address"), "SSRF record")
	}
	assert.True(t, has("net_connect", "deny", "", proxyPort, "proxy_auth"), "a connection without the credential is recorded")
	assert.True(t, has("net_http", "allow", "localhost", tlsPort, ""), "bound secret request record")
	assert.True(t, has("kernel_denied", "deny", "", 0, ""), "the refused UDP socket is recorded")
	assert.Contains(t, raw, fmt.Sprintf("127.0.0.2:%d", proxyPort), "the refused connect to the proxy's port elsewhere is recorded")
	assert.Contains(t, raw, fmt.Sprintf("127.0.0.1:%d", ok), "the raw connect past the proxy (python, node's fetch) is recorded")
	assert.NotContains(t, raw, boundValue)
	assert.NotContains(t, raw, "network by destination (", "no run fell back to no network")
	// The record keeps the whole list the one line sums up.
	var missing []any
	for _, r := range recs {
		if r.Event == "sandbox_degraded" {
			missing, _ = r.Details["missing"].([]any)
		}
	}
	assert.Greater(t, len(missing), 2, "sandbox_degraded keeps every missing protection:\n%s", raw)
}

// installedDir is where fledge installed plugin name.
func installedDir(t *testing.T, h *hardened, name string) string {
	t.Helper()
	var found string
	_ = filepath.Walk(h.home, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() && filepath.Base(p) == name && found == "" {
			if _, err := os.Stat(filepath.Join(p, "plugin.toml")); err == nil {
				found = p
			}
		}
		return nil
	})
	require.NotEmpty(t, found, "installed %s", name)
	return found
}

// sameUserStatus is proxyStatus from a program of the ordinary user the sessions run as
// (uid 65534, not confined).
func sameUserStatus(t *testing.T, port int, cred string) string {
	t.Helper()
	h := ""
	if cred != "" {
		h = "Proxy-Authorization: Basic " + basicAuth(cred) + "\r\n"
	}
	script := `import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.settimeout(10)
s.sendall(("CONNECT localhost:1 HTTP/1.1\r\nHost: localhost:1\r\n" + sys.argv[2] + "\r\n").encode())
print(s.makefile("rb").readline().decode().strip())
`
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script,
		strconv.Itoa(port), h).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// proxyStatus sends a CONNECT to the proxy at addr with cred (user:pass, "" for none) and
// returns the status line.
func proxyStatus(t *testing.T, addr, cred string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "CONNECT localhost:1 HTTP/1.1\r\nHost: localhost:1\r\n"
	if cred != "" {
		req += "Proxy-Authorization: Basic " + basicAuth(cred) + "\r\n"
	}
	_, err = io.WriteString(c, req+"\r\n")
	require.NoError(t, err)
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

func basicAuth(cred string) string { return base64.StdEncoding.EncodeToString([]byte(cred)) }

// localTLSServer serves HTTPS on 127.0.0.1 with a certificate for localhost from a test
// CA; it returns the port and a file holding the CA (PEM) readable by everyone.
func localTLSServer(t *testing.T, dir string, h http.HandlerFunc) (int, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fledge hardened-host test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	ca := filepath.Join(dir, "test-ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644))
	return s.Listener.Addr().(*net.TCPAddr).Port, ca
}

// undiciPath installs undici (npm, under FLEDGE_TEST_NPM_DIR) for node's proxy support
// (Node 20 has none of its own: NODE_USE_ENV_PROXY came with 22.21 and 24.5) and returns
// its package directory, readable by the plugin's commands; "" when npm cannot reach the
// registry (said in the log).
func undiciPath(t *testing.T) string {
	t.Helper()
	const pkg = "undici@6.21.3"
	root := os.Getenv("FLEDGE_TEST_NPM_DIR")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		root = filepath.Join(cache, "fledge-test-npm")
	}
	prefix := filepath.Join(root, "undici-6.21.3")
	dir := filepath.Join(prefix, "node_modules", "undici")
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Log("npm not installed: node through the proxy not tried")
			return ""
		}
		require.NoError(t, os.MkdirAll(root, 0o755))
		staging, err := os.MkdirTemp(root, "undici-staging-")
		require.NoError(t, err)
		defer os.RemoveAll(staging)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", staging, pkg)
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Logf("npm install %s: %v (node through the proxy not tried)\n%s", pkg, err, b)
			return ""
		}
		if err := os.Rename(staging, prefix); err != nil && !os.IsExist(err) {
			if _, serr := os.Stat(dir); serr != nil {
				require.NoError(t, err)
			}
		}
	}
	return dir
}
