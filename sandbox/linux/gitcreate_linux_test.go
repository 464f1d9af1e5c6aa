// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// gitSwapper is a confined command that makes a fresh repository r/.git in the project and
// then swaps it, as fast as it can, with a symlink to an outside directory (renameat2
// RENAME_EXCHANGE), removing any hooks directory fledge made in the real one so there is
// always one to make again.
const gitSwapper = `import ctypes, os, sys, time
outside, stop = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("r/.git/objects"); os.makedirs("r/.git/refs")
open("r/.git/HEAD", "w").write("ref: refs/heads/main\n")
os.symlink(outside, "r/link")
print("ready", flush=True)
deadline = time.time() + 60
n = 0
while not os.path.exists(stop) and time.time() < deadline:
    # 316 is renameat2 on x86-64, 276 on arm64; 2 is RENAME_EXCHANGE; -100 is AT_FDCWD.
    libc.syscall(316 if os.uname().machine == "x86_64" else 276, -100, b"r/.git", -100, b"r/link", 2)
    n += 1
    if n % 64 == 0:
        for d in ("r/.git", "r/link"):
            for f in ("hooks", "config", "config.worktree"):
                try:
                    p = d + "/" + f
                    if not os.path.islink(d):
                        os.rmdir(p) if f == "hooks" else os.unlink(p)
                except OSError:
                    pass
print("swaps", n)
`

// TestGitProtectCreateRace: at every launch fledge creates a missing hooks directory and
// config in each repository of a writable root before it protects them. A command of the
// same plugin racing those launches swaps the repository's .git for a symlink to an
// outside directory (standing for /etc) between fledge's look and its create; fledge
// (root) must never create hooks, config or config.worktree there.
func TestGitProtectCreateRace(t *testing.T) {
	testutil.RequireContained(t)
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the racer")
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	stop := filepath.Join(e.project, "stop")

	spec := e.spec(`exec /usr/bin/python3 -c "$1" "$2" "$3"`, "sh", gitSwapper, e.outside, stop)
	// Read while the racer writes: a buffer the copier and the test share must lock.
	var out, errb testutil.SyncBuffer
	spec.Stdout, spec.Stderr = &out, &errb
	racer, err := sb.Start(context.Background(), spec)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "ready") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Contains(t, out.String(), "ready", errb.String())

	const launches = 150
	refused := 0
	for i := 0; i < launches; i++ {
		p, err := sb.Start(context.Background(), e.spec("true"))
		if err != nil {
			// A launch is refused when a protected path is a symlink at that moment.
			refused++
			continue
		}
		waitFor(t, p)
		if ents, _ := os.ReadDir(e.outside); len(ents) > 0 {
			break
		}
	}
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	waitFor(t, racer)
	t.Log(out.String(), refused, " launches refused")
	ents, err := os.ReadDir(e.outside)
	require.NoError(t, err)
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	assert.Empty(t, names, "fledge created git files where the racing symlink pointed")
}
