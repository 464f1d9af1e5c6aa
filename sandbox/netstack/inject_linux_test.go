// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/testkit/testutil"
)

const realToken = "real-token-8f2kQz71LmXw"

// testCA is a CA the test trusts for its upstream servers (the host's trust store).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA { return newTestCAtb(t) }

func newTestCAtb(t testing.TB) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (c *testCA) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// apiServer is a TLS server for api.test (HTTP/2 and HTTP/1.1) that says whether the
// request carried the real token, and serves a git repository at /repo.git to Basic
// credentials holding it. It keeps every Authorization it saw.
type apiServer struct {
	port uint16
	mu   sync.Mutex
	auth []string
}

func (s *apiServer) saw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

func newAPIServer(t *testing.T, ca *testCA, repoRoot string) *apiServer {
	t.Helper()
	as := &apiServer{}
	var git http.Handler
	if repoRoot != "" {
		git = &cgi.Handler{Path: mustLook(t, "git"), Args: []string{"http-backend"},
			Env: []string{"GIT_PROJECT_ROOT=" + repoRoot, "GIT_HTTP_EXPORT_ALL=1"}}
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		as.mu.Lock()
		as.auth = append(as.auth, a)
		as.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/repo.git") && git != nil {
			_, pass, _ := r.BasicAuth()
			if pass != realToken {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "auth", http.StatusUnauthorized)
				return
			}
			git.ServeHTTP(w, r)
			return
		}
		ok := a == "Bearer "+realToken || a == "token "+realToken || r.Header.Get("X-Api-Key") == realToken
		fmt.Fprintf(w, "auth-ok=%v proto=%s path=%s", ok, r.Proto, r.URL.Path)
	}))
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "api.test", "rules.test")}}
	s.StartTLS()
	t.Cleanup(s.Close)
	as.port = uint16(s.Listener.Addr().(*net.TCPAddr).Port)
	return as
}

func mustLook(t *testing.T, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// injectEngine starts an engine granting api.test (API_TOKEN bound to it), rules.test
// (narrowed by rules) and other.test (plain, not read), all on 127.0.0.1.
func injectEngine(t *testing.T, api uint16, other uint16, roots *x509.CertPool) (*Engine, *recorder, string, string) {
	t.Helper()
	p := strconv.Itoa(int(api))
	o := strconv.Itoa(int(other))
	pol, err := egress.NewPolicy(false, []string{"api.test:" + p, "127.0.0.1:" + p, "other.test:" + o, "127.0.0.1:" + o,
		"rules.test:" + p + " GET,HEAD /allowed/**"})
	if err != nil {
		t.Fatal(err)
	}
	apiDest, _ := egress.ParseDest("api.test:" + p)
	ph := "fledge-placeholder-0123456789abcdef0123456789abcdef"
	pol.Secrets = []egress.Secret{{Name: "API_TOKEN", Placeholder: ph, Value: realToken, Dests: []egress.Dest{apiDest}}}
	ca, err := egress.NewCA(pol.InterceptNames())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	n := &names{m: map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1", "rules.test": "127.0.0.1"}}
	e, err := Start(Config{Policy: pol, Record: rec.add, Resolve: n.resolve, CA: ca, RootCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return e, rec, ph, bundle
}

// inNSEnv runs a program in the engine's namespace with env added.
func inNSEnv(t *testing.T, e *Engine, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/proc/self/fd/3", name}, args...)...)
	cmd.ExtraFiles = []*os.File{e.NetNS()}
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(), "NO_COLOR=1"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A bound secret's value never enters the program: it holds a placeholder, and fledge puts
// the value into its requests to the bound destination only, whatever the client (curl,
// node fetch, python urllib, Go's net/http over HTTP/2, git over https with a credential
// helper), through a TLS it terminates with the session CA the program trusts by the usual
// variables. Anything else is refused and recorded.
func TestEgressBoundSecretInjected(t *testing.T) {
	needEngine(t)
	need(t, "nsenter")
	ca := newTestCA(t)
	repo := gitRepo(t)
	api := newAPIServer(t, ca, repo)
	_, otherPort, otherHits := server(t, "other-body")
	e, rec, ph, bundle := injectEngine(t, api.port, otherPort, ca.pool)
	env := []string{"API_TOKEN=" + ph, "SSL_CERT_FILE=" + bundle, "NODE_EXTRA_CA_CERTS=" + bundle, "CURL_CA_BUNDLE=" + bundle, "GIT_SSL_CAINFO=" + bundle}
	url := fmt.Sprintf("https://api.test:%d/echo", api.port)
	clients := []struct {
		name string
		prog string
		args []string
	}{
		{"curl", "curl", []string{"-sS", "--max-time", "20", "-H", "Authorization: Bearer " + ph, url}},
		{"curl-basic", "curl", []string{"-sS", "--max-time", "20", "-u", "x-access-token:" + ph, fmt.Sprintf("https://api.test:%d/repo.git/info/refs?service=git-upload-pack", api.port)}},
		{"node-fetch", "node", []string{"-e", fmt.Sprintf(`fetch(%q,{headers:{"X-Api-Key":process.env.API_TOKEN}}).then(r=>r.text()).then(t=>process.stdout.write(t)).catch(e=>{console.error(String(e.cause||e));process.exit(3)})`, url)}},
		{"python-urllib", "/usr/bin/python3", []string{"-c", fmt.Sprintf(`import os,urllib.request,sys
r=urllib.request.Request(%q,headers={"Authorization":"token "+os.environ["API_TOKEN"]})
sys.stdout.write(urllib.request.urlopen(r,timeout=20).read().decode())`, url)}},
	}
	clients = append(clients, struct {
		name string
		prog string
		args []string
	}{"python-requests", "/usr/bin/python3", []string{"-c", fmt.Sprintf(`import os,sys,requests
r=requests.get(%q,headers={"Authorization":"Bearer "+os.environ["API_TOKEN"]},timeout=20)
sys.stdout.write(r.text)`, url)}})
	env = append(env, "REQUESTS_CA_BUNDLE="+bundle)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			need(t, c.prog)
			if c.name == "python-requests" {
				if err := exec.Command(c.prog, "-c", "import requests").Run(); err != nil {
					testutilSkip(t, "python3's requests is not installed (apt-get install python3-requests)")
				}
			}
			out, err := inNSEnv(t, e, env, c.prog, c.args...)
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if c.name == "curl-basic" {
				if !strings.Contains(out, "git-upload-pack") {
					t.Fatalf("git refs with Basic credentials: %q", out)
				}
			} else if !strings.Contains(out, "auth-ok=true") {
				t.Fatalf("the server did not get the real token: %q", out)
			}
			if strings.Contains(out, realToken) {
				t.Fatalf("the real token reached the program: %q", out)
			}
		})
	}
	t.Run("go-http2", func(t *testing.T) {
		pool := x509.NewCertPool()
		pem, _ := os.ReadFile(bundle)
		pool.AppendCertsFromPEM(pem)
		d := newNSDialer(t, e.NetNS())
		fake, _ := e.fake.assign("api.test")
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				return d.dial(fake.String() + ":" + strconv.Itoa(int(api.port)))
			}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/2.0" || !strings.Contains(string(b), "auth-ok=true proto=HTTP/2.0") {
			t.Fatalf("HTTP/2 both ways: client %s, body %q", resp.Proto, b)
		}
	})
	t.Run("git-clone", func(t *testing.T) {
		need(t, "git")
		dir := t.TempDir()
		genv := append(env, "GIT_CONFIG_COUNT=1",
			fmt.Sprintf("GIT_CONFIG_KEY_0=credential.https://api.test:%d.helper", api.port),
			`GIT_CONFIG_VALUE_0=!f() { test "$1" = get && printf 'username=x-access-token\npassword=%s\n' "$API_TOKEN"; }; f`,
			"GIT_TERMINAL_PROMPT=0")
		out, err := inNSEnv(t, e, genv, "git", "clone", "-q", fmt.Sprintf("https://api.test:%d/repo.git", api.port), filepath.Join(dir, "c"))
		if err != nil {
			t.Fatalf("git clone: %v %s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "c", "hello.txt"))
		if err != nil || string(b) != "hello over https\n" {
			t.Fatalf("cloned %q %v", b, err)
		}
	})
	t.Run("records", func(t *testing.T) {
		ev := rec.await(egress.EventHTTP, "api.test", true, egress.ReasonGranted)
		if ev == nil || len(ev.Secrets) != 1 || ev.Secrets[0] != "API_TOKEN" || ev.Method == "" || ev.Status == 0 {
			t.Fatalf("no net_http record naming the secret: %+v", rec.all())
		}
		for _, r := range rec.all() {
			if strings.Contains(fmt.Sprintf("%+v", r), realToken) {
				t.Fatalf("a record holds the value: %+v", r)
			}
		}
		for _, a := range api.saw() {
			if strings.Contains(a, ph) {
				t.Fatalf("the server got the placeholder: %q", a)
			}
		}
	})

	// Hostile: the placeholder to another granted destination, fronting the bound
	// address, a program that pins its own CA, 10,000 headers, request smuggling.
	t.Run("placeholder-elsewhere", func(t *testing.T) {
		before := otherHits.Load()
		out, _ := inNSEnv(t, e, env, "curl", "-sS", "--max-time", "10", "-H", "Authorization: Bearer "+ph, fmt.Sprintf("http://other.test:%d/", otherPort))
		if strings.Contains(out, "other-body") || otherHits.Load() != before {
			t.Fatalf("the placeholder went to other.test: %q", out)
		}
		if rec.await(egress.EventHTTP, "other.test", false, egress.ReasonPlaceholder) == nil {
			t.Fatalf("no unbound_secret record: %+v", rec.all())
		}
	})
	t.Run("fronting", func(t *testing.T) {
		out, _ := inNSEnv(t, e, env, "curl", "-sS", "--max-time", "10", "-H", "Host: other.test", "-H", "Authorization: Bearer "+ph, url)
		if strings.Contains(out, "auth-ok") {
			t.Fatalf("a request fronting api.test went through: %q", out)
		}
		if rec.await(egress.EventConnect, "other.test", false, egress.ReasonNameMismatch) == nil {
			t.Fatalf("no name_mismatch record: %+v", rec.all())
		}
	})
	t.Run("pinned-program", func(t *testing.T) {
		pinned := filepath.Join(t.TempDir(), "pin.pem")
		os.WriteFile(pinned, ca.pem, 0o644)
		out, err := inNSEnv(t, e, nil, "curl", "-sS", "--max-time", "10", "--cacert", pinned, url)
		if err == nil {
			t.Fatalf("a program pinning the real CA accepted fledge's certificate: %q", out)
		}
		if rec.await(egress.EventHTTP, "api.test", false, egress.ReasonTLSRefused) == nil {
			t.Fatalf("no tls_refused record: %+v", rec.all())
		}
	})
	t.Run("many-headers", func(t *testing.T) {
		out, _ := inNSEnv(t, e, env, "/usr/bin/python3", "-c", fmt.Sprintf(`import http.client,ssl,os
c=http.client.HTTPSConnection("api.test",%d,context=ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"]),timeout=20)
c.putrequest("GET","/echo")
for i in range(10000): c.putheader("x%%d"%%i,"1")
c.endheaders()
r=c.getresponse(); print(r.status)`, api.port))
		if strings.Contains(out, "200") || strings.TrimSpace(out) == "" {
			t.Fatalf("10,000 headers: %q", out)
		}
		if rec.await(egress.EventHTTP, "api.test", false, egress.ReasonBadRequest) == nil {
			t.Fatalf("no bad_request record: %+v", rec.all())
		}
	})
	t.Run("smuggling", func(t *testing.T) {
		before := len(api.saw())
		for _, raw := range []string{
			"POST /echo HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			"GET /echo HTTP/1.1\r\nHost: api.test\r\nX-A: 1\r\n folded\r\n\r\n",
		} {
			out, _ := inNSEnv(t, e, env, "/usr/bin/python3", "-c", fmt.Sprintf(`import socket,ssl,os,sys
ctx=ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
s=ctx.wrap_socket(socket.create_connection(("api.test",%d),timeout=10),server_hostname="api.test")
s.sendall(%s)
d=b""
try:
  while True:
    c=s.recv(4096)
    if not c: break
    d+=c
except OSError: pass
sys.stdout.write(d.decode("latin-1"))`, api.port, pyBytes(raw)))
			if strings.Contains(out, "auth-ok") {
				t.Fatalf("a smuggling-shaped request was served: %q", out)
			}
		}
		if len(api.saw()) != before {
			t.Fatal("a smuggling-shaped request reached the server")
		}
	})
	t.Run("reflected-header", func(t *testing.T) {
		// A header an API echoes back (here any non-credential header), and TRACE, which
		// echoes the whole request: the value is put in neither.
		before := len(api.saw())
		for _, args := range [][]string{
			{"-H", "X-Debug-Echo: " + ph, url},
			{"-H", "Referer: https://x/" + ph, url},
			{"-X", "TRACE", "-H", "Authorization: Bearer " + ph, url},
		} {
			out, _ := inNSEnv(t, e, env, "curl", append([]string{"-sS", "--http1.1", "--max-time", "10", "-w", "%{http_code}"}, args...)...)
			if !strings.HasSuffix(strings.TrimSpace(out), "403") || strings.Contains(out, realToken) {
				t.Fatalf("%v: %q", args, out)
			}
		}
		if len(api.saw()) != before {
			t.Fatal("a request with the placeholder in an echoed place reached the server")
		}
	})
	t.Run("rules", func(t *testing.T) {
		rurl := fmt.Sprintf("https://rules.test:%d", api.port)
		out, err := inNSEnv(t, e, env, "curl", "-sS", "--max-time", "10", rurl+"/allowed/x")
		if err != nil || !strings.Contains(out, "path=/allowed/x") {
			t.Fatalf("allowed by the rule: %v %q", err, out)
		}
		for _, c := range [][]string{{"-X", "POST", rurl + "/allowed/x"}, {rurl + "/other"}, {rurl + "/allowed/../other"}, {"--path-as-is", rurl + "/allowed/%2e%2e/other"}} {
			out, _ := inNSEnv(t, e, env, "curl", append([]string{"-sS", "--max-time", "10", "-w", "%{http_code}"}, c...)...)
			if !strings.HasSuffix(strings.TrimSpace(out), "403") || strings.Contains(out, "auth-ok") {
				t.Fatalf("%v: not refused: %q", c, out)
			}
		}
		if rec.await(egress.EventHTTP, "rules.test", false, egress.ReasonRule) == nil {
			t.Fatalf("no rule record: %+v", rec.all())
		}
	})
	t.Run("upstream-unverified", func(t *testing.T) {
		e2, rec2, ph2, bundle2 := injectEngine(t, api.port, otherPort, x509.NewCertPool())
		out, _ := inNSEnv(t, e2, []string{"SSL_CERT_FILE=" + bundle2, "CURL_CA_BUNDLE=" + bundle2}, "curl", "-sS", "--max-time", "10", "-w", "%{http_code}", "-H", "Authorization: Bearer "+ph2, url)
		if !strings.HasSuffix(strings.TrimSpace(out), "502") {
			t.Fatalf("an unverified destination: %q", out)
		}
		if rec2.await(egress.EventHTTP, "api.test", false, egress.ReasonUpstreamTLS) == nil {
			t.Fatalf("no upstream_tls record: %+v", rec2.evs)
		}
	})
	_ = base64.StdEncoding
}

// gitRepo makes a bare repository holding hello.txt; its parent is the project root of
// git http-backend.
func gitRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(args ...string) {
		out, err := exec.Command("git", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	run("init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "hello.txt"), []byte("hello over https\n"), 0o644)
	run("-C", work, "add", "hello.txt")
	run("-C", work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "hello")
	run("clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))
	return root
}

// pyBytes spells s as a python bytes literal.
func pyBytes(s string) string {
	var b strings.Builder
	b.WriteString(`b"`)
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, `\x%02x`, s[i])
	}
	b.WriteString(`"`)
	return b.String()
}

func testutilSkip(t *testing.T, why string) {
	t.Helper()
	testutil.SkipUnlessSupported(t, false, why)
}
