package linux

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/internal/testing/testutil"
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
