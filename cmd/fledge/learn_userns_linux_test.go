// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// userEnv is fledge run as an ordinary user (uid 65534 when the tests run as root), with a
// home, a project and plugin sources of its own.
type userEnv struct {
	exe, home, work, base string
	sys                   *syscall.SysProcAttr
}

func newUserEnv(t *testing.T) *userEnv {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	testutil.SkipUnlessSupported(t, err == nil && strings.TrimSpace(string(b)) != "0", "no user namespaces")
	base, err := os.MkdirTemp("", "fledge-user-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	e := &userEnv{exe: filepath.Join(base, "fledge"), home: filepath.Join(base, "home"), work: filepath.Join(base, "work"), base: base}
	// Named fledge: the test binary runs fledge's main.
	require.NoError(t, os.WriteFile(e.exe, data, 0o755))
	for _, d := range []string{e.home, e.work} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, exec.Command("git", "init", "-q", e.work).Run())
	if os.Geteuid() == 0 {
		e.sys = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return e
}

// plugin writes a plugin's files under the env's sources and returns its directory.
func (e *userEnv) plugin(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(e.base, "src", name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for f, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(body), 0o755))
	}
	return dir
}

// chown hands everything the env made to the user it runs as.
func (e *userEnv) chown(t *testing.T) {
	t.Helper()
	if e.sys == nil {
		return
	}
	require.NoError(t, filepath.Walk(e.base, func(p string, _ os.FileInfo, err error) error {
		if err != nil || p == e.base || p == e.exe {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	}))
}

// run runs fledge in the project; stdout and stderr apart, and the exit status.
func (e *userEnv) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(e.exe, args...)
	cmd.Dir = e.work
	cmd.Env = []string{"HOME=" + e.home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "NO_COLOR=1",
		"FLEDGE_CONFIG_DIR=" + filepath.Join(e.home, ".config", "fledge"),
		"FLEDGE_AUDIT_LOG=" + filepath.Join(e.home, "audit.jsonl")}
	cmd.SysProcAttr = e.sys
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, isExit := err.(*exec.ExitError); isExit {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

// TestLearnNetworkUnprivileged is plugins_learn_network.txtar as an ordinary user, whose
// runs each build a network namespace of their own: the connection localhost:PORT let
// through is not proposed as 127.0.0.1:PORT, the resolver a lookup went to (fledge's own
// answer in the namespace) is no destination to grant, the missing loopback port is
// proposed as localhost, and the evidence names the call once.
func TestLearnNetworkUnprivileged(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		testutil.SkipUnlessSupported(t, false, "curl not installed")
	}
	port := func() int {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") }))
		t.Cleanup(s.Close)
		return s.Listener.Addr().(*net.TCPAddr).Port
	}
	ok, bad := port(), port()
	e := newUserEnv(t)
	script := fmt.Sprintf(`#!/bin/sh
read -r INIT
out() { printf '{"type":"output","text":"%%s\\n"}\n' "$1"; }
out "ok=$(curl -s -o /dev/null --max-time 5 -w '%%{http_code}' http://localhost:%d/)"
out "bad=$(curl -s -o /dev/null --max-time 5 -w '%%{http_code}' http://127.0.0.1:%d/)"
out "name=$(getent hosts blocked.example.invalid >/dev/null 2>&1; echo $?)"
`, ok, bad)
	manifest := "[plugin]\nname = \"%s\"\nversion = \"1.0.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"%s\"\nbinary = \"run.sh\"\n%s"
	netl := e.plugin(t, "netl", map[string]string{"run.sh": script,
		"plugin.toml": fmt.Sprintf(manifest, "netl", "netl", fmt.Sprintf("\n[capabilities]\nnetwork = [\"localhost:%d\"]\n", ok))})
	nonet := e.plugin(t, "nonet", map[string]string{"run.sh": script,
		"plugin.toml": fmt.Sprintf(manifest, "nonet", "nonet", "")})
	e.chown(t)
	for _, src := range []string{netl, nonet} {
		out, errs, code := e.run(t, "--ni", "plugins", "install", src, "--yes")
		require.Equal(t, 0, code, "install: %s%s", out, errs)
	}
	out, errs, code := e.run(t, "--ni", "plugins", "learn", "netl")
	require.Equal(t, 0, code, "%s%s", out, errs)
	require.Contains(t, out, "│ ok=200\n", "the granted destination was reached: %s%s", out, errs)
	proposals := regexp.MustCompile(`(?m)^  fledge plugins grant \S+ (\S+)$`)
	grants := func(out string) (g []string) {
		for _, m := range proposals.FindAllStringSubmatch(out, -1) {
			g = append(g, m[1])
		}
		return g
	}
	assert.Equal(t, []string{fmt.Sprintf("network=localhost:%d", bad)}, grants(out), out)
	assert.NotContains(t, out, "connect connect", out)
	assert.Regexp(t, `(?m)^  blocked\.example\.invalid \(`, out)

	out, errs, code = e.run(t, "--ni", "plugins", "learn", "nonet")
	require.Equal(t, 0, code, "%s%s", out, errs)
	assert.ElementsMatch(t, []string{fmt.Sprintf("network=localhost:%d", ok), fmt.Sprintf("network=localhost:%d", bad)}, grants(out), out)
	assert.NotContains(t, out, "connect connect", out)
}
