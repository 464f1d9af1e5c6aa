// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// systemTrustPlugin reaches its bound destination over TLS with none of the CA variables
// (it removes them, as a program that ignores them would): python's
// ssl.create_default_context() in its own process and curl in a command both read only
// OpenSSL's default paths. It looks "localhost" up through fledge's DNS itself (its libc
// would answer from /etc/hosts, an address fledge decides without a name, spliced).
const systemTrustPlugin = `#!/usr/bin/python3
import json, os, socket, ssl, sys
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def out(s):
    send({"type": "output", "text": s + "\n"})
port = int(open(__file__ + ".port").read())
for k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO"):
    os.environ.pop(k, None)
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x09localhost\x00\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(10)
u.sendto(q, (ns, 53))
ip = socket.inet_ntoa(u.recv(512)[-4:])
try:
    s = ssl.create_default_context().wrap_socket(socket.create_connection((ip, port), timeout=20), server_hostname="localhost")
    s.sendall(("GET /py HTTP/1.0\r\nHost: localhost:%d\r\nAuthorization: Bearer %s\r\n\r\n" % (port, os.environ["SVC_TOKEN"])).encode())
    body = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        body += b
    out("python " + body.decode().split("\r\n\r\n", 1)[-1])
except ssl.SSLCertVerificationError as e:
    out("python refused " + e.verify_message)
send({"type": "exec", "id": "1", "command":
      "env -u SSL_CERT_FILE -u CURL_CA_BUNDLE curl -sS --max-time 20 --connect-to localhost:%d:%s:%d -H \"Authorization: Bearer $SVC_TOKEN\" https://localhost:%d/curl 2>&1" % (port, ip, port, port)})
r = json.loads(sys.stdin.readline())["value"]
out("curl " + r["stdout"].strip())
`

// A plugin and its commands trust the session CA with which fledge reads a bound secret's
// destination even when they read no variable, only the system CA bundle: the private
// filesystem view shows the session's bundle there. The server gets the real token; the
// plugin never holds it.
func TestTrustBundleSystemPathsEndToEnd(t *testing.T) {
	if err := netstack.Supported(); err != nil {
		testutil.SkipUnlessSupported(t, false, "network by destination: "+err.Error())
	}
	for _, p := range []string{"/usr/bin/python3", "/usr/bin/curl"} {
		_, err := os.Stat(p)
		testutil.SkipUnlessSupported(t, err == nil, p+" not installed")
	}
	const token = "real-token-3Jq8vXw2"
	caPEM, cert := localhostCA(t)
	var mu sync.Mutex
	var saw []string
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		saw = append(saw, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "auth-ok=%v", r.Header.Get("Authorization") == "Bearer "+token)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	port := s.Listener.Addr().(*net.TCPAddr).Port

	e := newPtyEnv(t, "")
	// fledge verifies the upstream server against the host's trust store: here, this CA.
	upstream := filepath.Join(t.TempDir(), "upstream.pem")
	require.NoError(t, os.WriteFile(upstream, caPEM, 0o644))
	e.env = append(e.env, "SSL_CERT_FILE="+upstream, "SVC_TOKEN="+token)
	src := filepath.Join(filepath.Dir(e.home), "src", "systrust")
	require.NoError(t, os.MkdirAll(src, 0o700))
	manifest := fmt.Sprintf("[plugin]\nname = \"systrust\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n"+
		"[[commands]]\nname = \"systrust\"\nbinary = \"p.py\"\n\n[capabilities]\nexec = true\n"+
		"secrets = [\"SVC_TOKEN@localhost:%d\"]\n", port)
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "p.py"), []byte(systemTrustPlugin), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "p.py.port"), fmt.Appendf(nil, "%d", port), 0o644))
	out, code := e.run(t, "--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)

	res, code := e.run(t, "--ni", "systrust")
	require.Equal(t, 0, code, res)
	l := lines(res)
	assert.Equal(t, "auth-ok=true", l["python"], "python's default context in the plugin:\n%s", res)
	assert.Equal(t, "auth-ok=true", l["curl"], "curl's default bundle in a command:\n%s", res)
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, []string{"/py Bearer " + token, "/curl Bearer " + token}, saw, "the server got the real token")
	assert.NotContains(t, res, token)
}
