// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSetIDBitsRefused: Landlock does not govern chmod, and as root every system file is
// root's own; the seccomp filter refuses to set S_ISUID/S_ISGID by any route (chmod,
// fchmod, fchmodat, open with O_CREAT, mknod) while ordinary modes still work.
func TestSetIDBitsRefused(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the syscall-level attempts")
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			py := `import os
def attempt(name, fn):
    try:
        fn(); print(name, "DONE")
    except OSError as e:
        print(name, "refused", e.errno)
open("plain", "w").close()
attempt("chmod+x", lambda: os.chmod("plain", 0o755))
attempt("chmod-suid", lambda: os.chmod("plain", 0o4755))
attempt("chmod-sgid", lambda: os.chmod("plain", 0o2755))
fd = os.open("plain", os.O_RDONLY)
attempt("fchmod-suid", lambda: os.fchmod(fd, 0o4755))
attempt("open-creat-suid", lambda: os.close(os.open("created", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open-nocreat-garbage-mode", lambda: os.close(os.open("plain", os.O_RDONLY, 0o4755)))
attempt("mknod-suid-fifo", lambda: os.mknod("fifo", 0o4644 | 0o010000))
`
			spec := e.spec(`exec /usr/bin/python3 -c "$1"; echo; ls -l`, "sh", py)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, errOut)
			assert.Contains(t, out, "chmod+x DONE")
			assert.Contains(t, out, "chmod-suid refused 1")
			assert.Contains(t, out, "chmod-sgid refused 1")
			assert.Contains(t, out, "fchmod-suid refused 1")
			assert.Contains(t, out, "open-creat-suid refused 1")
			assert.Contains(t, out, "open-nocreat-garbage-mode DONE", "without O_CREAT the mode is ignored")
			assert.Contains(t, out, "mknod-suid-fifo refused 1")
			st, err := os.Stat(filepath.Join(e.project, "plain"))
			require.NoError(t, err)
			assert.Zero(t, st.Mode()&(os.ModeSetuid|os.ModeSetgid), "no set-id bit landed: %v", st.Mode())
			assert.NoFileExists(t, filepath.Join(e.project, "created"))
		})
	}
}
