// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestExpandEtcLeavesOutSecrets(t *testing.T) {
	got := expandEtc([]string{"/proc", "/etc", "/etc"})
	assert.Equal(t, "/proc", got[0])
	assert.Contains(t, got, "/etc/passwd")
	for _, s := range []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssl/private", "/etc", "/etc/ssh/ssh_host_ed25519_key"} {
		assert.NotContains(t, got, s)
	}
	seen := map[string]bool{}
	for _, p := range got {
		assert.False(t, seen[p], "duplicate rule %s", p)
		seen[p] = true
	}
}

// A confined command run by root (who owns /etc/shadow and needs no capability to read
// it) must not read the password hashes, while ordinary /etc files stay readable.
func TestRootCannotReadShadow(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root: others cannot read /etc/shadow anyway")
	_, err := os.Stat("/etc/shadow")
	testutil.SkipUnlessSupported(t, err == nil, "no /etc/shadow on this system")
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec(`cat /etc/shadow >/dev/null 2>&1 && echo SHADOW-READ; head -c1 /etc/passwd >/dev/null && echo PASSWD-OK; exit 0`))
	require.Equal(t, 0, res.ExitCode, errOut)
	assert.NotContains(t, out, "SHADOW-READ")
	assert.Contains(t, out, "PASSWD-OK")
}

// TestEtcExpansionFollowsChanges: the kept /etc expansion is reused only while /etc (and
// each directory it listed) is unchanged: an entry added, a secret added, and an entry
// replaced by a symlink (which must then be left out) are all seen on the next exec.
func TestEtcExpansionFollowsChanges(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "ssh")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	for _, f := range []string{"a", "b", "ssh/config"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, f), nil, 0o644))
	}
	secrets := []string{root + "/shadow", root + "/ssh/*_key"}
	// Old enough to be kept (a fresh directory's times are not trusted).
	time.Sleep(etcSettle + 100*time.Millisecond)
	var c etcExpansion
	first := c.list(root, secrets)
	assert.ElementsMatch(t, []string{root + "/a", root + "/b", sub + "/config"}, first)
	require.NotNil(t, c.stamps, "kept")
	assert.Equal(t, first, c.list(root, secrets), "reused while unchanged")

	require.NoError(t, os.WriteFile(filepath.Join(root, "shadow"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(sub, "host_key"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(sub, "known"), nil, 0o644))
	require.NoError(t, os.Remove(filepath.Join(root, "b")))
	require.NoError(t, os.Symlink("/root", filepath.Join(root, "b")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "c"), nil, 0o644))
	got := c.list(root, secrets)
	assert.ElementsMatch(t, []string{root + "/a", root + "/c", sub + "/config", sub + "/known"}, got)
	assert.Nil(t, c.stamps, "just changed: not kept")
}
