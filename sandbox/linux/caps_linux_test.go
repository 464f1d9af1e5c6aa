// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootCommandHasNoCapabilities attacks what Landlock does not cover: a command run by a
// root fledge must not keep root's capabilities (reboot, module loading, host network
// config, raw devices). It checks the kernel's view of the process and tries mknod.
func TestRootCommandHasNoCapabilities(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root to prove capabilities are dropped")
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			res, out, errOut := run(t, sb, e.spec(`grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; mknod blockdev b 8 0 && echo MKNOD-OK; exit 0`))
			require.Equal(t, 0, res.ExitCode, errOut)
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasPrefix(line, "Cap") {
					continue
				}
				fields := strings.Fields(line)
				require.Len(t, fields, 2, line)
				assert.Equal(t, "0000000000000000", fields[1], "capability set not empty: %s", line)
			}
			assert.Contains(t, out, "CapBnd:")
			assert.NotContains(t, out, "MKNOD-OK")
			assert.NoFileExists(t, filepath.Join(e.project, "blockdev"))
			// The host thread pool keeps its capabilities: a later run still works.
			res, _, errOut = run(t, sb, e.spec(`true`))
			assert.Equal(t, 0, res.ExitCode, errOut)
		})
	}
	// The host process itself is untouched.
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	assert.NotContains(t, string(status), "CapEff:\t0000000000000000")
}
