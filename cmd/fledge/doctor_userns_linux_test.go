// SPDX-License-Identifier: MIT

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

	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestDoctorUnprivileged runs `fledge doctor` as an ordinary user (uid 65534 when the
// tests run as root): where the kernel allows user namespaces, it reports the private view
// built in one, with the run's own /proc, and strict does not refuse for want of a view.
func TestDoctorUnprivileged(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	testutil.SkipUnlessSupported(t, err == nil && strings.TrimSpace(string(b)) != "0", "no user namespaces")
	u := newUnprivileged(t)
	doctor := func(args ...string) string {
		out, stderr, err := u.run(u.base, append([]string{"doctor"}, args...)...)
		require.NoError(t, err, "%s%s", out, stderr)
		return out
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
	// The view protects git metadata here, as it does for root: doctor says so once, without
	// taking it back on the next line.
	assert.Contains(t, text, "git metadata:     hooks, config and .git files of repositories, worktrees and submodules in writable roots are read-only\n")
	assert.NotContains(t, text, "not here")
}

// unprivileged is a copy of this test binary, named fledge, run as an ordinary user (uid
// 65534 when the tests run as root) with a home of its own.
type unprivileged struct {
	base, exe, home string
	sys             *syscall.SysProcAttr
}

func newUnprivileged(t *testing.T) *unprivileged {
	t.Helper()
	base, err := os.MkdirTemp("", "fledge-doctor-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(self)
	require.NoError(t, err)
	// Named fledge, the test binary runs fledge's main (testscript.Main dispatches on it).
	u := &unprivileged{base: base, exe: filepath.Join(base, "fledge"), home: filepath.Join(base, "home")}
	require.NoError(t, os.WriteFile(u.exe, data, 0o755))
	require.NoError(t, os.Mkdir(u.home, 0o700))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(u.home, 65534, 65534))
		u.sys = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return u
}

// chown hands the tree at p to the ordinary user.
func (u *unprivileged) chown(t *testing.T, p string) {
	t.Helper()
	if u.sys == nil {
		return
	}
	require.NoError(t, filepath.Walk(p, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 65534, 65534)
	}))
}

// run runs fledge in dir as the ordinary user.
func (u *unprivileged) run(dir string, args ...string) (string, string, error) {
	cmd := exec.Command(u.exe, args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + u.home, "PATH=/usr/bin:/bin", "FLEDGE_CONFIG_DIR=" + filepath.Join(u.home, ".config", "fledge"),
		"FLEDGE_AUDIT_LOG=" + filepath.Join(u.home, "audit.jsonl")}
	cmd.SysProcAttr = u.sys
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestStrictRefusalSaysItOnce: with strict = true, a run an ordinary user's machine cannot
// confine fully (no cgroup of its own here) is refused, and the refusal says "sandbox
// unavailable" once, with why, instead of the sentinel of every layer it passed through.
func TestStrictRefusalSaysItOnce(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	testutil.SkipUnlessSupported(t, err == nil && strings.TrimSpace(string(b)) != "0", "no user namespaces")
	u := newUnprivileged(t)
	cfg := filepath.Join(u.home, ".config", "fledge")
	require.NoError(t, os.MkdirAll(cfg, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cfg, "config.toml"), []byte("[sandbox]\nstrict = true\n"), 0o600))
	// A fledge-v1 plugin and a legacy one (no protocol): two ways to the same refusal.
	for name, proto := range map[string]string{"st": "protocol = \"fledge-v1\"\n", "stlegacy": ""} {
		src := filepath.Join(u.base, name)
		require.NoError(t, os.MkdirAll(src, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(
			"[plugin]\nname = \""+name+"\"\nversion = \"1.0.0\"\n"+proto+"\n[[commands]]\nname = \""+name+"\"\nbinary = \"run.sh\"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\nread line\n"), 0o755))
		u.chown(t, src)
	}
	u.chown(t, u.home)
	out, stderr, err := u.run(u.base, "doctor", "--json")
	require.NoError(t, err, "%s%s", out, stderr)
	var rep struct {
		Refuse bool `json:"strict_refuse"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	if !rep.Refuse {
		t.Skip("this machine confines an ordinary user fully: strict has nothing to refuse")
	}
	for _, name := range []string{"st", "stlegacy"} {
		out, stderr, err = u.run(u.base, "--ni", "plugins", "install", "--yes", filepath.Join(u.base, name))
		require.NoError(t, err, "%s%s", out, stderr)
		_, stderr, err = u.run(u.base, "--ni", name)
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, stderr)
		assert.Equal(t, 126, ee.ExitCode(), stderr)
		assert.Equal(t, 1, strings.Count(stderr, "sandbox unavailable"), "said once: %s", stderr)
		assert.Contains(t, stderr, "sandbox unavailable: cgroup", stderr)
		assert.Contains(t, stderr, "(reason: sandbox_unavailable; strict policy in "+filepath.Join(cfg, "config.toml")+")", stderr)
	}
}
