// SPDX-License-Identifier: MIT

package linux

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

const debianBundle = "/etc/ssl/certs/ca-certificates.crt"

// writeBundle writes a bundle file the way the host does for a session (a directory of
// its own, the file readable by all) and returns its path.
func writeBundle(t *testing.T, content string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fledge-ca-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	p := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

// TestViewTrustBundleAtSystemPaths: a run given a trust bundle reads the bundle's content
// at the host's system CA bundle path and at OpenSSL's default path that leads there,
// cannot write it, and sees it mounted read-only, nosuid, nodev; a run without one reads
// the host's own file. Runs with different bundles on one sandbox (one template cache)
// each see their own, never another's: a template is never reused across bundles.
func TestViewTrustBundleAtSystemPaths(t *testing.T) {
	host, err := os.ReadFile(debianBundle)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+debianBundle+" on the host")
	hasOpenSSLDefault := false
	if dst, err := filepath.EvalSymlinks("/usr/lib/ssl/cert.pem"); err == nil && dst == debianBundle {
		hasOpenSSLDefault = true
	}
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			// Digests, not contents: a failure shows which file the run saw, not 200 kB.
			script := `sha256sum ` + debianBundle + `
[ -e /usr/lib/ssl/cert.pem ] && sha256sum /usr/lib/ssl/cert.pem
(echo planted > ` + debianBundle + `) 2>/dev/null && echo WRITABLE
grep " ` + debianBundle + ` " /proc/self/mountinfo | cut -d" " -f6 >&2
true`
			for i, content := range []string{"BUNDLE-ONE\n", "BUNDLE-TWO\n", "", "BUNDLE-ONE-AGAIN\n"} {
				spec := e.spec(script)
				want := digest(host)
				if content != "" {
					spec.TrustBundle = writeBundle(t, content)
					want = digest([]byte(content))
				}
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, "run %d\nstdout:\n%s\nstderr:\n%s", i, out, errOut)
				assert.NotContains(t, out, "WRITABLE", "run %d: the bundle is read-only in the view", i)
				expect := want + "  " + debianBundle + "\n"
				if hasOpenSSLDefault {
					expect += want + "  /usr/lib/ssl/cert.pem\n"
				}
				assert.Equal(t, expect, out, "run %d (bundle %q; the host's is %s)", i, content, digest(host))
				if content != "" {
					opts := strings.TrimSpace(errOut)
					for _, o := range []string{"ro", "nosuid", "nodev"} {
						assert.Contains(t, strings.Split(opts, ","), o, "run %d: mount options %q", i, opts)
					}
				}
			}
			if sb.templates != nil {
				// One template per bundle (and one without): never one shared, rebuilt in turn.
				sb.templates.mu.Lock()
				n := len(sb.templates.m)
				sb.templates.mu.Unlock()
				assert.Equal(t, 4, n, "view templates")
			}
			after, err := os.ReadFile(debianBundle)
			require.NoError(t, err)
			assert.Equal(t, string(host), string(after), "the host's bundle is unchanged on disk")
		})
	}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestViewTrustBundleTemplateReused: the runs of a session with one trust bundle share
// one template (the bundle costs its runs no rebuild).
func TestViewTrustBundleTemplateReused(t *testing.T) {
	_, err := os.Stat(debianBundle)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+debianBundle+" on the host")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	require.NotNil(t, sb.templates)
	e := newEnv(t)
	bundle := writeBundle(t, "REUSED\n")
	for i := 0; i < 4; i++ {
		spec := e.spec(`cat ` + debianBundle)
		spec.TrustBundle = bundle
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		require.Equal(t, "REUSED\n", out)
	}
	sb.templates.mu.Lock()
	defer sb.templates.mu.Unlock()
	require.Len(t, sb.templates.m, 1)
	for _, vt := range sb.templates.m {
		assert.EqualValues(t, 4, vt.t.Entered(), "every run entered the one template")
	}
}

// TestViewTrustBundleUnderWorkingDirectory: a run whose working directory is the
// directory holding the system bundle (its tree mounted on top of the view's) still reads
// the trust bundle there, not the host's file the working directory's mount brought back.
func TestViewTrustBundleUnderWorkingDirectory(t *testing.T) {
	_, err := os.Stat(debianBundle)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+debianBundle+" on the host")
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			for _, dir := range []string{filepath.Dir(debianBundle), "/etc"} {
				d, err := os.Open(dir)
				require.NoError(t, err)
				spec := e.spec(`cat ` + debianBundle + `; pwd`)
				spec.Dir, spec.DirPath = d, dir
				spec.TrustBundle = writeBundle(t, "IN-CWD\n")
				res, out, errOut := run(t, sb, spec)
				d.Close()
				require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
				assert.Equal(t, "IN-CWD\n"+dir+"\n", out, "working directory %s", dir)
			}
		})
	}
}

// TestTrustBundleRefusedSpecs: a trust bundle that is not an absolute path of a regular
// file, or that lies in a denied path, refuses the run with ErrInvalidSpec before anything
// starts.
func TestTrustBundleRefusedSpecs(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	good := writeBundle(t, "X\n")
	link := filepath.Join(filepath.Dir(good), "link.pem")
	require.NoError(t, os.Symlink(good, link))
	inDeny := filepath.Join(e.config, "ca.pem")
	require.NoError(t, os.WriteFile(inDeny, []byte("X\n"), 0o644))
	for name, p := range map[string]string{
		"relative":  "ca.pem",
		"unclean":   filepath.Dir(good) + "/../" + filepath.Base(filepath.Dir(good)) + "/ca.pem",
		"missing":   filepath.Join(filepath.Dir(good), "none.pem"),
		"directory": filepath.Dir(good),
		"symlink":   link,
		"denied":    inDeny,
	} {
		t.Run(name, func(t *testing.T) {
			spec := e.spec(`echo ran`)
			spec.TrustBundle = p
			proc, err := sb.Start(t.Context(), spec)
			if err == nil {
				waitFor(t, proc)
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, sandbox.ErrInvalidSpec), "%v", err)
			assert.Contains(t, err.Error(), "trust bundle")
		})
	}
}

// testCA is a CA and a server certificate for localhost signed by it.
type testCA struct {
	pem    []byte
	server tls.Certificate
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fledge test session CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	skey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	sder, err := x509.CreateCertificate(rand.Reader, leaf, ca, &skey.PublicKey, key)
	require.NoError(t, err)
	return &testCA{
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		server: tls.Certificate{Certificate: [][]byte{sder}, PrivateKey: skey},
	}
}

// serveTLS answers every TLS connection on a loopback port with one line and returns its
// address.
func serveTLS(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if tc, ok := c.(*tls.Conn); ok && tc.Handshake() == nil {
					_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestTrustBundleRealClients: python's ssl.create_default_context() and curl, inside a
// confined run with none of the CA variables set (OpenSSL's default paths only), trust a
// server whose CA is in the run's trust bundle and nowhere else; without the bundle the
// same run refuses the server's certificate.
func TestTrustBundleRealClients(t *testing.T) {
	// The system python (a version manager's shim under $HOME is not in the view).
	python, perr := exec.LookPath("/usr/bin/python3")
	curl, cerr := exec.LookPath("curl")
	testutil.SkipUnlessSupported(t, perr == nil || cerr == nil, "needs python3 or curl")
	host, err := os.ReadFile(debianBundle)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+debianBundle+" on the host")
	ca := newTestCA(t)
	addr := serveTLS(t, ca.server)
	_, port, _ := net.SplitHostPort(addr)
	bundle := writeBundle(t, string(host)+"\n"+string(ca.pem))

	pyScript := `import ssl, socket
ctx = ssl.create_default_context()
try:
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", ` + port + `), timeout=10), server_hostname="localhost")
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("python:", s.recv(100).decode().split("\r\n\r\n")[-1].strip())
except ssl.SSLCertVerificationError as e:
    print("python: refused", e.verify_message)
`
	var script strings.Builder
	if perr == nil {
		fmt.Fprintf(&script, "%s -c '%s'\n", python, pyScript)
	}
	if cerr == nil {
		fmt.Fprintf(&script, "%s -sS --max-time 10 https://localhost:%s/ 2>/dev/null && echo curl: ok || echo curl: refused\n", curl, port)
	}
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			for _, withBundle := range []bool{true, false} {
				spec := e.spec(script.String())
				spec.Network = true
				if withBundle {
					spec.TrustBundle = bundle
				}
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
				for _, v := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"} {
					for _, kv := range spec.Env {
						require.False(t, strings.HasPrefix(kv, v+"="), "the run's environment names no bundle")
					}
				}
				if withBundle {
					if perr == nil {
						assert.Contains(t, out, "python: hello\n", "stderr: %s", errOut)
					}
					if cerr == nil {
						assert.Contains(t, out, "hello\ncurl: ok\n", "stderr: %s", errOut)
					}
				} else {
					if perr == nil {
						assert.Contains(t, out, "python: refused", "stderr: %s", errOut)
					}
					if cerr == nil {
						assert.Contains(t, out, "curl: refused\n", "stderr: %s", errOut)
					}
				}
			}
		})
	}
}
