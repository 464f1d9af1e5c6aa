// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// These two attacks were written by a reviewer against the exec path's checks of the
// access lists (a grant inside the project a command writes, turned into a way out).

// flipGrantPy flips <project>/.venv/bin between a harmless directory and the denied tree's
// parent (../../.config) for $1 seconds: what a command can do in the project it writes.
const flipGrantPy = `import os, sys, time
end = time.time() + float(sys.argv[1])
i = 0
while time.time() < end:
    os.symlink("../../.config" if i % 2 == 0 else "real-bin", ".venv/bin.tmp")
    os.replace(".venv/bin.tmp", ".venv/bin")
    i += 1
`

// TestAttackGrantFlippedWhileAnExecStarts: a confined command flips a granted path that lies
// in the project it writes (a virtualenv's bin on PATH) between a harmless directory and the
// parent of the denied config dir, while its plugin starts execs whose lists grant that path.
// Every exec must be refused or confined as checked: none may read the denied tree. The
// lists are checked (remembered or not) before the Landlock ruleset is built from the same
// paths, so the rule can land on what the check never saw unless the two are tied.
func TestAttackGrantFlippedWhileAnExecStarts(t *testing.T) {
	testutil.RequireContained(t)
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the flipping command")
	for _, view := range []bool{true, false} {
		t.Run(fmt.Sprint("view=", view), func(t *testing.T) {
			sb := newSandbox(t, Options{DisableView: !view})
			e := newEnv(t)
			require.NoError(t, os.MkdirAll(filepath.Join(e.project, ".venv", "real-bin"), 0o755))
			bin := filepath.Join(e.project, ".venv", "bin")
			require.NoError(t, os.Symlink("real-bin", bin))
			grants := append(append([]string{}, SystemReadExec...), bin)
			flip := e.spec(`exec /usr/bin/python3 -c "$1" 20`, "sh", flipGrantPy)
			flip.Access.ReadExec = grants
			var fo, fe testutil.SyncBuffer
			flip.Stdout, flip.Stderr = &fo, &fe
			p, err := sb.Start(context.Background(), flip)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
			time.Sleep(200 * time.Millisecond)
			ran, refused, leaked := 0, 0, 0
			for range 300 {
				// Through the denied path, or through the grant (a view mounts what it names).
				s := e.spec(`{ cat "$HOME/.config/fledge/plugins.toml" || cat .venv/bin/fledge/plugins.toml; } 2>/dev/null && echo LEAK`)
				s.Access.ReadExec = grants
				var out bytes.Buffer
				s.Stdout = &out
				q, err := sb.Start(context.Background(), s)
				if err != nil {
					require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
					refused++
					continue
				}
				ran++
				waitFor(t, q)
				if strings.Contains(out.String(), "LEAK") {
					leaked++
				}
			}
			t.Logf("%d execs ran, %d refused, %d read the denied config (flipper: %q %q)", ran, refused, leaked, fo.String(), fe.String())
			require.Positive(t, refused, "the flipping was seen (else the race was not run)")
			require.Zero(t, leaked, "an exec read the denied config dir through a flipped grant")
		})
	}
}

// TestAttackGrantRetargetedBetweenExecs: no race needed. A grant that lies in the project a
// command writes (a virtualenv's bin on the user's PATH) is replaced by that command with a
// symlink to ~/.ssh, which no Deny path covers, so the lists pass every check; the next
// exec's Landlock rule lands on ~/.ssh and it reads the key. The view (which mounts only
// what it grants) holds; Landlock alone (no user namespaces, or the view disabled) does not.
func TestAttackGrantRetargetedBetweenExecs(t *testing.T) {
	testutil.RequireContained(t)
	for _, view := range []bool{true, false} {
		t.Run(fmt.Sprint("view=", view), func(t *testing.T) {
			sb := newSandbox(t, Options{DisableView: !view})
			e := newEnv(t)
			bin := filepath.Join(e.project, ".venv", "bin")
			require.NoError(t, os.MkdirAll(bin, 0o755))
			grants := append(append([]string{}, SystemReadExec...), bin)
			// Exec 1: the plugin's command swaps the granted directory for a link.
			first := e.spec(`mv .venv/bin .venv/bin.old && ln -s "$HOME/.ssh" .venv/bin`)
			first.Access.ReadExec = grants
			res, _, errOut := run(t, sb, first)
			require.Equal(t, 0, res.ExitCode, errOut)
			// Exec 2: same lists.
			second := e.spec(`cat "$HOME/.ssh/id_rsa" .venv/bin/id_rsa 2>/dev/null; true`)
			second.Access.ReadExec = grants
			var out bytes.Buffer
			second.Stdout = &out
			p, err := sb.Start(context.Background(), second)
			if err != nil {
				require.ErrorIs(t, err, sandbox.ErrInvalidSpec, "refused, or confined as granted")
				return
			}
			waitFor(t, p)
			require.NotContains(t, out.String(), "SECRET-KEY", "the second exec read ~/.ssh through the retargeted grant")
		})
	}
}
