// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestEgressThroughCLIUnprivileged is TestEgressThroughCLI from an ordinary user's fledge
// (uid 65534 when the tests run as root): the plugin (python urllib) and its commands (curl,
// node fetch, getent) reach the granted localhost:PORT and nothing else, each run in a
// namespace of its own that its stub built and handed to the session's engine; doctor says
// so and the audit log has the records.
func TestEgressThroughCLIUnprivileged(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	testutil.SkipUnlessSupported(t, err == nil && strings.TrimSpace(string(b)) != "0", "no user namespaces")
	for _, p := range []string{"curl", "node", "/usr/bin/python3", "getent"} {
		if _, err := exec.LookPath(p); err != nil {
			testutil.SkipUnlessSupported(t, false, p+" not installed")
		}
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

	base, err := os.MkdirTemp("", "fledge-egress-user-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	exe := filepath.Join(base, "fledge") // named fledge: the test binary runs fledge's main
	require.NoError(t, os.WriteFile(exe, data, 0o755))
	home, work, src := filepath.Join(base, "home"), filepath.Join(base, "work"), filepath.Join(base, "src", "netp")
	for _, d := range []string{home, work, src} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	manifest := fmt.Sprintf("[plugin]\nname = \"netp\"\nversion = \"0.1.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"netp\"\nbinary = \"netp.py\"\n\n[capabilities]\nexec = true\nnetwork = [\"localhost:%d\"]\n", ok)
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(manifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "netp.py"), []byte(netPlugin), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "netp.py.ports"), fmt.Appendf(nil, "%d %d -\n", ok, bad), 0o644))
	var sys *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		require.NoError(t, filepath.Walk(base, func(p string, _ os.FileInfo, err error) error {
			if err != nil || p == base || p == exe {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		}))
		sys = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(exe, args...)
		cmd.Dir = work
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "NO_COLOR=1",
			"FLEDGE_CONFIG_DIR=" + filepath.Join(home, ".config", "fledge"),
			"FLEDGE_AUDIT_LOG=" + filepath.Join(home, "audit.jsonl")}
		cmd.SysProcAttr = sys
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, isExit := err.(*exec.ExitError); isExit {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return out.String(), code
	}
	var rep struct {
		Sandbox struct {
			Egress string `json:"network_egress"`
		} `json:"sandbox"`
		Root bool `json:"root"`
	}
	doc, _ := run("doctor", "--json")
	require.NoError(t, json.Unmarshal([]byte(doc), &rep), doc)
	require.False(t, rep.Root)
	if strings.HasPrefix(rep.Sandbox.Egress, "none") && (strings.Contains(rep.Sandbox.Egress, "egress namespace setup failed") ||
		strings.Contains(rep.Sandbox.Egress, "no network namespace")) {
		// The kernel refuses a TUN device or a network namespace in a user namespace.
		testutil.SkipUnlessSupported(t, false, "unprivileged network by destination: "+rep.Sandbox.Egress)
	}
	assert.Contains(t, rep.Sandbox.Egress, "per run (unprivileged")

	out, code := run("--ni", "plugins", "install", "--yes", src)
	require.Equal(t, 0, code, "install: %s", out)
	out, code = run("--ni", "netp")
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
	assert.Equal(t, int64(3), okHits.Load(), "plugin urllib, curl and node reached the granted port")
	assert.Zero(t, badHits.Load(), "nothing reached the ungranted port")

	raw, _ := run("audit", "show", "--json")
	has := func(event, decision, host string, port int, why string) bool {
		for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
			var r auditRec
			if json.Unmarshal([]byte(line), &r) != nil {
				continue
			}
			if r.Event == event && r.Decision == decision && (host == "" || r.Details["host"] == host) &&
				(port == 0 || r.Details["port"] == float64(port)) && (why == "" || r.Details["why"] == why) {
				return true
			}
		}
		return false
	}
	assert.True(t, has("net_connect", "allow", "localhost", ok, "granted"), "allow record")
	assert.True(t, has("net_close", "allow", "localhost", ok, ""), "close record")
	assert.True(t, has("net_dns", "deny", "evil.test", 0, "not_granted"), "dns deny record")
	assert.True(t, has("net_connect", "deny", "", 80, "not_granted"), "address deny record")
	assert.NotContains(t, raw, "network by destination (", "no run fell back to no network")
}
