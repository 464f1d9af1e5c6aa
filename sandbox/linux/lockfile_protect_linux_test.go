// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestViewProtectsProjectLockFile attacks fledge.lock (what `fledge plugins sync` installs
// and grants) from a confined command with the project writable, in a git checkout, in a
// plain dir and in a project one level down: overwriting, appending, truncating, removing,
// moving it (or its dir) aside and replacing it by a rename all fail and leave it unchanged on disk,
// while the rest of the project stays writable.
func TestViewProtectsProjectLockFile(t *testing.T) {
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			requireView(t, sb)
			root := t.TempDir()
			gitCmd(t, root, "init", "-q", root)
			sub := filepath.Join(root, "nested")
			require.NoError(t, os.MkdirAll(sub, 0o755))
			const lock = "version = 1\n"
			for _, d := range []string{root, sub} {
				require.NoError(t, os.WriteFile(filepath.Join(d, "fledge.lock"), []byte(lock), 0o644))
			}
			script := attemptScript + `for d in . nested; do
attempt "$d-overwrite" sh -c 'echo "[[plugin]]" > "$1/fledge.lock"' sh "$d"
attempt "$d-append" sh -c 'echo "[[plugin]]" >> "$1/fledge.lock"' sh "$d"
attempt "$d-truncate" truncate -s 0 "$d/fledge.lock"
attempt "$d-rm" rm -f "$d/fledge.lock"
attempt "$d-mv" mv "$d/fledge.lock" "$d/fledge.lock.aside"
attempt "$d-replace" sh -c 'echo evil > "$1/new" && mv -f "$1/new" "$1/fledge.lock"' sh "$d"
done
attempt dir-mv mv nested nested-aside
echo ok > other && cat other`
			spec := gitAttackSpec(t, script, root, root)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, d := range []string{".", "nested"} {
				requireRefused(t, out, d+"-overwrite", d+"-append", d+"-truncate", d+"-rm", d+"-mv", d+"-replace")
			}
			requireRefused(t, out, "dir-mv")
			assert.Contains(t, out, "\nok\n", "the project stays writable")
			for _, d := range []string{root, sub} {
				b, err := os.ReadFile(filepath.Join(d, "fledge.lock"))
				require.NoError(t, err)
				assert.Equal(t, lock, string(b), "%s unchanged on disk", d)
				assert.NoFileExists(t, filepath.Join(d, "fledge.lock.aside"))
			}
		})
	}
}
