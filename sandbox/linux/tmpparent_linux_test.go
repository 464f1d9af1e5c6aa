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

// TestPrivateTmpParentSymlink: fledge's own TMPDIR lies in the project (a user who set
// TMPDIR=$PWD/.tmp). A command replaces that directory with a symlink to an outside
// directory (standing for /etc); the next run's private temp dir must not be made there,
// nor granted read-write there. Watched on disk while the second command runs (fledge
// removes the temp dir afterwards, so the end state alone would hide it).
func TestPrivateTmpParentSymlink(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	tmp := filepath.Join(e.project, ".tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))
	t.Setenv("TMPDIR", tmp)

	plant := e.spec(`rmdir .tmp && ln -s "$1" .tmp`, "sh", e.outside)
	plant.PrivateTmp = false
	res, _, errOut := run(t, sb, plant)
	require.Equal(t, 0, res.ExitCode, errOut)
	link, err := os.Readlink(tmp)
	require.NoError(t, err)
	require.Equal(t, e.outside, link, "the command planted its link")

	spec := e.spec(`echo pwned > "$TMPDIR/planted"; echo "tmp=$TMPDIR"; sleep 1`)
	var out, errb testutil.SyncBuffer
	spec.Stdout, spec.Stderr = &out, &errb
	p, err := sb.Start(context.Background(), spec)
	require.NoError(t, err)
	// Looked at once the command has written (it says its TMPDIR after), while it still
	// runs: the run's temp dir is removed at its end, so a look after would see nothing.
	deadline := time.Now().Add(waitBound)
	for !strings.Contains(out.String(), "tmp=") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Contains(t, out.String(), "tmp=", "the command never wrote: %s", errb.String())
	var seen []string
	ents, _ := os.ReadDir(e.outside)
	for _, en := range ents {
		seen = append(seen, en.Name())
	}
	r := waitFor(t, p)
	assert.Equal(t, 0, r.ExitCode, errb.String())
	assert.Empty(t, seen, "fledge made the run's temp dir where the planted link points")
	assert.NotContains(t, out.String(), "tmp="+tmp, "the run's TMPDIR is not beneath the project's planted link")
}

// TestPrivateTmpRemovalStaysInside: the run's temp dir is removed after it ends, with
// whatever the command left there. Symlinks it planted (to a directory and a file standing
// for /etc and a secret) are removed as links; what they point at is untouched. Go's
// os.RemoveAll opens each level with O_NOFOLLOW beneath its parent's handle; this keeps it
// that way.
func TestPrivateTmpRemovalStaysInside(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.outside, "keep"), []byte("keep"), 0o644))
	spec := e.spec(`mkdir -p "$TMPDIR/d" && ln -s "$1" "$TMPDIR/dirlink" && ln -s "$1/keep" "$TMPDIR/filelink" && ln -s "$1" "$TMPDIR/d/deeper" && echo "$TMPDIR"`, "sh", e.outside)
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	tmpdir := strings.TrimSpace(out)
	require.NotEmpty(t, tmpdir)
	// Emptying (and removal, when not kept for the next run: runtmp_linux.go) runs after
	// the result is handed back: wait for it.
	sb.cleanups.Wait()
	ents, err := os.ReadDir(tmpdir)
	if err == nil {
		assert.Empty(t, ents, "the run's temp dir is emptied")
	} else {
		assert.ErrorIs(t, err, os.ErrNotExist, "the run's temp dir is gone")
	}
	got, err := os.ReadFile(filepath.Join(e.outside, "keep"))
	require.NoError(t, err)
	assert.Equal(t, "keep", string(got), "what the links pointed at is untouched")
}
