// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// attackPlugin is a fledge-v1 plugin granted two loopback destinations (an HTTP server OK
// and an HTTPS git server GIT). In its own process it tries what is not TCP to a granted
// destination: MPTCP to an ungranted address and to the granted port, ICMP (ping and raw
// sockets), AF_PACKET, and a tight loop of connections to an ungranted address. Its
// commands clone over HTTPS with git and fetch with a Go net/http client.
const attackPlugin = `#!/usr/bin/python3
import json, socket, sys, time
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def out(s):
    send({"type": "output", "text": s + "\n"})
ok, bad, git = [int(x) for x in open(__file__ + ".ports").read().split()]
def mptcp(label, host, port):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    except OSError as e:
        out("%s nosocket %s" % (label, e.errno)); return
    s.settimeout(5)
    try:
        s.connect((host, port))
        s.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        body = s.recv(4096).decode(errors="replace").split("\r\n\r\n", 1)[-1]
        out("%s ok %s" % (label, body))
    except OSError as e:
        out("%s fail %s" % (label, type(e).__name__))
mptcp("mptcp-ungranted", "192.0.2.7", 80)
mptcp("mptcp-port", "127.0.0.1", bad)
mptcp("mptcp-granted", "127.0.0.1", ok)
def sock(label, *a):
    try:
        socket.socket(*a); out("%s created" % label)
    except OSError as e:
        out("%s refused %d" % (label, e.errno))
sock("icmp-ping", socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
sock("icmp-raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock("raw-tcp", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
sock("packet", socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
sock("icmp6-ping", socket.AF_INET6, socket.SOCK_DGRAM, socket.IPPROTO_ICMPV6)
start, fails = time.time(), 0
for i in range(1000):
    try:
        socket.create_connection(("192.0.2.9", 443), timeout=2).close()
    except OSError:
        fails += 1
out("flood fails=%d secs=%.1f" % (fails, time.time() - start))
n = 0
def ex(label, cmd):
    global n
    n += 1
    send({"type": "exec", "id": str(n), "command": cmd})
    r = json.loads(sys.stdin.readline())["value"]
    out("%s code=%d out=%s" % (label, r["code"], " | ".join((r["stdout"] + r.get("stderr", "")).split("\n")).strip()))
ex("exec-git", "git -c http.sslCAInfo=$PWD/ca.pem clone -q https://localhost:%d/repo.git \"$TMPDIR/clone\" && cat \"$TMPDIR/clone/hello.txt\"" % git)
ex("exec-git-ungranted", "git -c http.sslCAInfo=$PWD/ca.pem ls-remote https://localhost:%d/repo.git" % bad)
ex("exec-goclient", "./goclient http://localhost:%d/ http://localhost:%d/ https://localhost:%d/repo.git/info/refs" % (ok, bad, git))
`

// goClient is a Go net/http client (Go's own resolver and dialer, not libc's).
const goClient = `package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile("ca.pem")
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for i, u := range os.Args[1:] {
		r, err := c.Get(u)
		if err != nil {
			fmt.Printf("go%d fail\n", i)
			continue
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		fmt.Printf("go%d status=%d len=%d %.20s\n", i, r.StatusCode, len(b), b)
	}
}
`

// localhostCA makes a self-signed certificate for "localhost" (PEM) and its TLS pair.
func localhostCA(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// gitServer serves a bare repository holding hello.txt over HTTPS (git http-backend as
// CGI behind a Go TLS server) and counts its requests.
func gitServer(t *testing.T, cert tls.Certificate) (int, *atomic.Int64) {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	for _, c := range [][]string{
		{"git", "init", "-q", "-b", "main", work},
		{"git", "-C", work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"},
	} {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", c, out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(work, "hello.txt"), []byte("hello over https\n"), 0o644))
	for _, c := range [][]string{
		{"git", "-C", work, "add", "hello.txt"},
		{"git", "-C", work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "hello"},
		{"git", "clone", "-q", "--bare", work, filepath.Join(root, "repo.git")},
	} {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", c, out)
	}
	backend, err := exec.LookPath("git")
	require.NoError(t, err)
	var hits atomic.Int64
	h := &cgi.Handler{Path: backend, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s.Listener.Addr().(*net.TCPAddr).Port, &hits
}

// auditRecs reads the audit log as JSON records.
type auditRec struct {
	Event    string         `json:"event"`
	Decision string         `json:"decision"`
	Details  map[string]any `json:"details"`
}

func auditRecords(t *testing.T, e *ptyEnv) ([]auditRec, string) {
	t.Helper()
	raw, _ := e.run(t, "audit", "show", "--json")
	var got []auditRec
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		var r auditRec
		if json.Unmarshal([]byte(line), &r) == nil {
			got = append(got, r)
		}
	}
	return got, raw
}

// Real clients and attacks from inside a confined plugin and its commands, against a grant
// of two loopback destinations: git over HTTPS and Go's net/http reach them; MPTCP is
// decided like TCP (the ungranted address and port refused, the granted port answers);
// ICMP, raw and packet sockets cannot even be made; a tight loop of 1,000 refused
// connections ends fast and leaves a bounded number of records. Checked on the servers and
// in the audit log.
func TestEgressAttacksFromPlugin(t *testing.T) {
	if err := netstack.Supported(); err != nil {
		testutil.SkipUnlessSupported(t, false, "network by destination: "+err.Error())
	}
	for _, p := range []string{"git", "go", "/usr/bin/python3"} {
		if _, err := exec.LookPath(p); err != nil {
			testutil.SkipUnlessSupported(t, false, p+" not installed")
		}
	}
	// Positive control: unconfined (root), the same sockets can be made.
	if os.Geteuid() == 0 {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300)
		require.NoError(t, err, "AF_PACKET unconfined")
		unix.Close(fd)
	}
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
	caPEM, cert := localhostCA(t)
	gitPort, gitHits := gitServer(t, cert)

	e := newPtyEnv(t, "")
	src := filepath.Join(filepath.Dir(e.home), "src", "attackp")
	require.NoError(t, os.MkdirAll(src, 0o700))
	// The plugin's commands run in its directory: the CA and the Go client ship with it.
	require.NoError(t, os.WriteFile(filepath.Join(src, "ca.pem"), caPEM, 0o644))
	gosrc := filepath.Join(t.TempDir(), "goclient")
	require.NoError(t, os.MkdirAll(gosrc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gosrc, "main.go"), []byte(goClient), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(gosrc, "go.mod"), []byte("module goclient\n\ngo 1.22\n"), 0o644))
	build := exec.Command("go", "build", "-o", filepath.Join(src, "goclient"), ".")
	build.Dir, build.Env = gosrc, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build the Go client: %s", out)

	manifest := fmt.Sprintf("[plugin]\nname = \"attackp\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n"+
		"[[commands]]\nname = \"attackp\"\nbinary = \"attackp.py\"\n\n[capabilities]\nexec = true\n"+
		"network = [\"localhost:%d\", \"localhost:%d\"]\n", ok, gitPort)
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "attackp.py"), []byte(attackPlugin), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "attackp.py.ports"), fmt.Appendf(nil, "%d %d %d\n", ok, bad, gitPort), 0o644))
	out2, code := e.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out2)

	start := time.Now()
	res, code := e.run(t, "--ni", "attackp")
	took := time.Since(start)
	require.Equal(t, 0, code, res)
	l := lines(res)
	t.Logf("plugin run took %v:\n%s", took, res)

	// MPTCP: the kernel falls back to TCP on the TUN device; the stack decides it as TCP.
	if !strings.HasPrefix(l["mptcp-granted"], "nosocket") {
		assert.Contains(t, l["mptcp-ungranted"], "fail", res)
		assert.Contains(t, l["mptcp-port"], "fail", res)
		assert.Equal(t, "ok granted-body", l["mptcp-granted"], res)
	}
	for _, k := range []string{"icmp-ping", "icmp-raw", "raw-tcp", "packet", "icmp6-ping"} {
		assert.Contains(t, l[k], "refused", "%s: %s", k, res)
	}
	var fails int
	var secs float64
	_, err = fmt.Sscanf(l["flood"], "fails=%d secs=%f", &fails, &secs)
	require.NoError(t, err, res)
	assert.Equal(t, 1000, fails, "every connection of the loop refused")
	assert.Less(t, secs, 30.0, "the refused loop is refused fast (a reset each time)")
	assert.True(t, strings.HasPrefix(l["exec-git"], "code=0 out=hello over https"), "git over https: %s", res)
	assert.NotContains(t, l["exec-git-ungranted"], "code=0", res)
	assert.Contains(t, l["exec-goclient"], "go0 status=200 len=12 granted-body", res)
	assert.Contains(t, l["exec-goclient"], "go1 fail", res)
	assert.Contains(t, l["exec-goclient"], "go2 status=200", res)
	assert.Equal(t, int64(2), okHits.Load(), "MPTCP and the Go client reached the granted port")
	assert.Zero(t, badHits.Load(), "nothing reached the ungranted port")
	assert.Positive(t, gitHits.Load())

	recs, raw := auditRecords(t, e)
	netLines := []string{}
	for _, line := range strings.Split(raw, "\n") {
		if strings.Contains(line, `"event":"net_`) {
			netLines = append(netLines, line)
		}
	}
	raw = strings.Join(netLines, "\n")
	count := func(event, decision, addr string, port int) (n, suppressed int) {
		for _, r := range recs {
			if r.Event == event && r.Decision == decision && (addr == "" || r.Details["address"] == addr) &&
				(port == 0 || r.Details["port"] == float64(port)) {
				n++
				if s, ok := r.Details["suppressed"].(float64); ok {
					suppressed += int(s)
				}
			}
		}
		return n, suppressed
	}
	n, _ := count("net_connect", "deny", "192.0.2.7", 80)
	assert.Positive(t, n, "the MPTCP connection to an ungranted address is a TCP deny record:\n%s", raw)
	n, _ = count("net_connect", "allow", "", gitPort)
	assert.Positive(t, n, "git's connections are recorded:\n%s", raw)
	n, _ = count("net_connect", "allow", "", ok)
	assert.Equal(t, 2, n, "MPTCP and the Go client, one allow record each")
	n, sup := count("net_connect", "deny", "192.0.2.9", 443)
	assert.LessOrEqual(t, n, 25, "the loop's records are bounded")
	assert.Positive(t, n)
	t.Logf("refused loop: %d records, %d counted in them", n, sup)
	// Each attempt is a record or counted in one; the count of the last window comes in a
	// record of its own when the session ends (hence 1,001 at most).
	assert.True(t, n+sup >= 1000 && n+sup <= 1001, "every refused attempt is written or counted: %d records, %d counted", n, sup)
}
