// SPDX-License-Identifier: MIT

package mcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

var servingRe = regexp.MustCompile(`serving MCP over Streamable HTTP at (\S+) \(bearer token in (\S+)\)`)

// httpServe is one `fledge serve --mcp --listen` running in f's world.
type httpServe struct {
	url, tokenFile, token string
	stderr                *bytes.Buffer
	mu                    *sync.Mutex
}

// startHTTPServe starts `fledge <args> serve --mcp --listen 127.0.0.1:0 <extra>` from dir and
// waits for it to say where it listens; the test's end stops it (SIGTERM) and waits.
func startHTTPServe(t *testing.T, c *fledgeCLI, dir string, extra ...string) *httpServe {
	t.Helper()
	args := append([]string{"serve", "--mcp", "--listen", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(c.fledge, args...)
	cmd.Dir, cmd.Env = dir, c.env()
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); _ = pw.Close() }()
	s := &httpServe{stderr: &bytes.Buffer{}, mu: &sync.Mutex{}}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.mu.Lock()
			s.stderr.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case m := <-found:
		s.url, s.tokenFile = m[1], m[2]
	case err := <-done:
		t.Fatalf("fledge serve ended before listening: %v\n%s", err, s.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("fledge serve did not say where it listens:\n%s", s.log())
	}
	b, err := os.ReadFile(s.tokenFile)
	require.NoError(t, err)
	s.token = strings.TrimSpace(string(b))
	return s
}

func (s *httpServe) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

type tsHTTPResult struct {
	tsResult
	SessionID string `json:"sessionId"`
}

// tsHTTP runs testdata/ts_http_client.mjs (the official TypeScript client over Streamable
// HTTP) against url, offering roots, holding the session open for hold after its calls.
func tsHTTP(t *testing.T, f *fixture, sdk, url, token string, roots []string, hold time.Duration, calls []map[string]any) (*tsHTTPResult, error) {
	clientDir := filepath.Join(f.base, "httpclient")
	if _, err := os.Stat(filepath.Join(clientDir, "ts_http_client.mjs")); err != nil {
		copyFile(t, filepath.Join("testdata", "ts_http_client.mjs"), filepath.Join(clientDir, "ts_http_client.mjs"), 0o755)
		_ = os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(clientDir, "node_modules"))
	}
	cl, _ := json.Marshal(calls)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodePath(t), filepath.Join(clientDir, "ts_http_client.mjs"), url, token, string(cl))
	cmd.Env = append(os.Environ(), fmt.Sprintf("FLEDGE_TEST_HOLD_MS=%d", hold.Milliseconds()))
	if roots != nil {
		r, _ := json.Marshal(roots)
		cmd.Env = append(cmd.Env, "FLEDGE_TEST_ROOTS="+string(r))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	var r tsHTTPResult
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("%w: %s", err, stdout.String())
	}
	return &r, nil
}

// Two clients of the official TypeScript SDK over Streamable HTTP at once, each naming its
// own project as its root: each session has its own filesystem server confined to its own
// project (the other project does not read), and each session is on record.
func TestServeMCPOverHTTPSessionsEachWithItsProject(t *testing.T) {
	sdk := npmInstall(t, pkgSDK)
	fsPkg := npmInstall(t, pkgFilesystem)
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	src := f.mcpPlugin("fs", "project", "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "$FLEDGE_PROJECT_ROOT")
	copyTree(t, filepath.Join(fsPkg, "node_modules"), filepath.Join(src, "node_modules"))
	f.install(src)
	projA, projB := filepath.Join(f.base, "alpha"), filepath.Join(f.base, "beta")
	for _, p := range []string{projA, projB} {
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "README.md"), []byte("this is "+filepath.Base(p)+"\n"), 0o644))
	}
	s := startHTTPServe(t, c, "/")
	st, err := os.Stat(s.tokenFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the generated token is the owner's only")
	assert.Equal(t, filepath.Join(f.home, ".local", "state", "fledge", "mcp-http-token"), s.tokenFile)

	read := func(p string) map[string]any {
		return map[string]any{"name": "plugin_fs_read_text_file", "arguments": map[string]any{"path": filepath.Join(p, "README.md")}}
	}
	var wg sync.WaitGroup
	res := make([]*tsHTTPResult, 2)
	errs := make([]error, 2)
	for i, pair := range [][2]string{{projA, projB}, {projB, projA}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = tsHTTP(t, f, sdk, s.url, s.token, []string{"file://" + pair[0]}, 1500*time.Millisecond,
				[]map[string]any{read(pair[0]), read(pair[1])})
		}()
	}
	wg.Wait()
	defer func() {
		if t.Failed() {
			t.Logf("serve stderr:\n%s", s.log())
		}
	}()
	for i, own := range []string{"alpha", "beta"} {
		require.NoError(t, errs[i], "serve stderr: %s", s.log())
		r := res[i]
		assert.Equal(t, "fledge", r.Server.Name)
		assert.Contains(t, r.names(), "plugin_fs_read_text_file")
		require.Len(t, r.Calls, 2)
		assert.False(t, r.Calls[0].IsError, "%+v", r.Calls[0])
		assert.Contains(t, callText(r.Calls[0]), "this is "+own, "its own project reads")
		assert.True(t, r.Calls[1].IsError || r.Calls[1].Thrown != "", "the other session's project does not: %+v", r.Calls[1])
		assert.NotRegexp(t, `this is (alpha|beta)`, callText(r.Calls[1]))
	}
	require.NotEmpty(t, res[0].SessionID)
	assert.NotEqual(t, res[0].SessionID, res[1].SessionID)

	// Each session ended with its client (DELETE): two starts, two ends, the client named.
	require.Eventually(t, func() bool { return len(f.records(audit.EventClientSessionEnd)) == 2 }, 20*time.Second, 100*time.Millisecond, s.log())
	starts := f.records(audit.EventClientSessionStart)
	require.Len(t, starts, 2)
	for _, r := range f.records(audit.EventClientSessionEnd) {
		assert.Equal(t, "fledge-ts-http-test", r.Details["client_name"])
		assert.Equal(t, "closed", r.Details["ended"])
		assert.Equal(t, "streamable-http", r.Details["transport"])
		assert.Equal(t, "2", fmt.Sprint(r.Details["tool_calls"]))
	}
	assert.NotEqual(t, starts[0].Session, starts[1].Session)
	assert.Len(t, f.records(audit.EventToolOutcome), 4, "every call is on record")
	// The client session's plugins ended with it.
	require.Eventually(t, func() bool {
		return len(f.records(audit.EventPluginExit)) == len(f.records(audit.EventPluginStart))
	}, 20*time.Second, 100*time.Millisecond)
	assert.NotContains(t, s.log(), s.token, "the token is never printed")
}

// curl, a client that is not an SDK: no token or a wrong one is 401, a foreign Origin is
// 403 even with the token, a body over line_max is 413, a session past --max-sessions is
// 503, and a --token-file's surrounding whitespace is not part of the token.
func TestServeMCPOverHTTPRefusals(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed (.ci/run installs it)")
	}
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	require.NoError(t, os.WriteFile(filepath.Join(f.configDir, "config.toml"), []byte("[limits]\nline_max = 65536\n"), 0o600))
	tokenFile := filepath.Join(f.base, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("\n  s3cret-token \t\n"), 0o600))
	s := startHTTPServe(t, c, f.project, "--token-file", tokenFile, "--max-sessions", "1")
	require.Equal(t, "s3cret-token", s.token)

	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	do := func(body string, headers ...string) (int, string) {
		t.Helper()
		args := []string{"-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST", "--max-time", "20",
			"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream"}
		for _, h := range headers {
			args = append(args, "-H", h)
		}
		args = append(args, "--data-binary", "@-", s.url)
		cmd := exec.Command(curl, args...)
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.Output()
		require.NoError(t, err)
		text := strings.TrimSpace(string(out))
		i := strings.LastIndex(text, "\n")
		var code int
		fmt.Sscan(text[i+1:], &code)
		if i < 0 {
			return code, ""
		}
		return code, text[:i]
	}
	code, body := do(initBody)
	assert.Equal(t, 401, code, body)
	code, body = do(initBody, "Authorization: Bearer wrong")
	assert.Equal(t, 401, code, body)
	code, body = do(initBody, "Authorization: Bearer s3cret-token", "Origin: http://evil.example:80")
	assert.Equal(t, 403, code, body)
	code, body = do(initBody, "Authorization: Bearer s3cret-token", "Origin: "+strings.TrimSuffix(s.url, "/mcp")+".evil.example")
	assert.Equal(t, 403, code, body)
	code, body = do(initBody, "Authorization: Bearer s3cret-token", "Host: rebound.evil.example")
	assert.Equal(t, 403, code, "a loopback request for another host name (DNS rebinding): %s", body)
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
	code, body = do(big, "Authorization: Bearer s3cret-token")
	assert.Equal(t, 413, code, body)
	assert.Empty(t, f.records(audit.EventClientSessionStart), "nothing refused opened a session")

	code, body = do(initBody, "Authorization: Bearer s3cret-token", "Origin: "+strings.TrimSuffix(s.url, "/mcp"))
	assert.Equal(t, 200, code, body)
	assert.Contains(t, body, `"serverInfo":{"name":"fledge"`)
	code, body = do(initBody, "Authorization: Bearer s3cret-token")
	assert.Equal(t, 503, code, body)
	assert.Contains(t, body, "at most 1 at once")
	require.Eventually(t, func() bool { return len(f.records(audit.EventClientSessionStart)) == 1 }, 10*time.Second, 50*time.Millisecond)
}

// Listening beyond loopback needs --listen-public and TLS: a usage error (exit 2) otherwise,
// before anything listens.
func TestServeMCPListenPublicNeedsTLS(t *testing.T) {
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	for _, args := range [][]string{
		{"serve", "--mcp", "--listen", "0.0.0.0:0"},
		{"serve", "--mcp", "--listen", "192.0.2.1:0"},
		{"serve", "--mcp", "--listen", "0.0.0.0:0", "--listen-public"},
		{"serve", "--mcp", "--listen", "127.0.0.1:0", "--tls-cert", "x.pem"},
		{"serve", "--mcp", "--listen-public"},
	} {
		_, stderr, err := c.run(f.project, args...)
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %v", args, err)
		assert.Equal(t, 2, ee.ExitCode(), "%v: %s", args, stderr)
		assert.NotContains(t, stderr, "serving MCP", args)
	}
}

// With --tls-cert and --tls-key the listener speaks HTTPS (here on loopback, where TLS is
// allowed though not required): curl reaches it over TLS with the token, and plain HTTP
// to it gets nowhere.
func TestServeMCPOverHTTPS(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed (.ci/run installs it)")
	}
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	certFile, keyFile := selfSigned(t, f.base)
	s := startHTTPServe(t, c, f.project, "--tls-cert", certFile, "--tls-key", keyFile)
	require.True(t, strings.HasPrefix(s.url, "https://127.0.0.1:"), s.url)
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	out, err := exec.Command(curl, "-sS", "--cacert", certFile, "--max-time", "20", "-X", "POST",
		"-H", "Authorization: Bearer "+s.token, "-H", "Content-Type: application/json",
		"-H", "Accept: application/json, text/event-stream", "--data-binary", initBody, s.url).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), `"serverInfo":{"name":"fledge"`)
	plain := "http://" + strings.TrimPrefix(s.url, "https://")
	out, _ = exec.Command(curl, "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
		"-H", "Authorization: Bearer "+s.token, "--data-binary", initBody, plain).CombinedOutput()
	assert.NotContains(t, string(out), "200", "plain HTTP is not served")
}

// selfSigned writes a certificate for 127.0.0.1 and its key (PEM) under dir.
func selfSigned(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return certFile, keyFile
}
