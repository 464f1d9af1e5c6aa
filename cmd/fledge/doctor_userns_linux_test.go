package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/internal/testing/testutil"
)

// TestDoctorUnprivileged runs `fledge doctor` as an ordinary user (uid 65534 when the
// tests run as root): where the kernel allows user namespaces, it reports the private view
// built in one, with the run's own /proc, and strict does not refuse for want of a view.
func TestDoctorUnprivileged(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	testutil.SkipUnlessSupported(t, err == nil && strings.TrimSpace(string(b)) != "0", "no user namespaces")
	base, err := os.MkdirTemp("", "fledge-doctor-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	// Named fledge, the test binary runs fledge's main (testscript.Main dispatches on it).
	exe := filepath.Join(base, "fledge")
	require.NoError(t, os.WriteFile(exe, data, 0o755))
	home := filepath.Join(base, "home")
	require.NoError(t, os.Mkdir(home, 0o700))
	var sys *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(home, 65534, 65534))
		sys = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	doctor := func(args ...string) string {
		cmd := exec.Command(exe, append([]string{"doctor"}, args...)...)
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "FLEDGE_CONFIG_DIR=" + filepath.Join(home, ".config", "fledge"),
			"FLEDGE_AUDIT_LOG=" + filepath.Join(home, "audit.jsonl")}
		cmd.SysProcAttr = sys
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s%s", out, stderr.String())
		return string(out)
	}
	var rep struct {
		Sandbox struct {
			View     string   `json:"filesystem_view"`
			NetDeny  string   `json:"network_deny"`
			TreeKill string   `json:"tree_kill"`
			IPC      string   `json:"ipc_namespace"`
			System   string   `json:"system_files"`
			Warnings []string `json:"warnings"`
		} `json:"sandbox"`
		Root bool `json:"root"`
	}
	require.NoError(t, json.Unmarshal([]byte(doctor("--json")), &rep))
	require.False(t, rep.Root)
	assert.Equal(t, "mount-namespace+userns", rep.Sandbox.View, "warnings: %q", rep.Sandbox.Warnings)
	assert.Contains(t, rep.Sandbox.NetDeny, "netns")
	assert.Equal(t, "per-run", rep.Sandbox.IPC, "the init stub is cloned with CLONE_NEWIPC")
	assert.Equal(t, "others-only", rep.Sandbox.System)
	for _, w := range rep.Sandbox.Warnings {
		assert.NotContains(t, w, "filesystem view")
	}
	text := doctor()
	assert.Contains(t, text, "filesystem view:  private (mount namespace in a user namespace: only granted paths exist")
	assert.Contains(t, text, "/proc is the run's own pid namespace")
	assert.Contains(t, text, "SysV IPC, mqueue: its own run's only")
	assert.NotContains(t, text, "warning: no private filesystem view")
}
