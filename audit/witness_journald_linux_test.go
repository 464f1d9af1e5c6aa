// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWitnessJournald sends checkpoints to a real systemd-journald and reads them back with
// journalctl, as an auditor would. The journal runs in a private mount and pid namespace
// with its own /run (tmpfs), so the host's journal and /run are not touched.
func TestWitnessJournald(t *testing.T) {
	journald := "/lib/systemd/systemd-journald"
	_, jerr := os.Stat(journald)
	journalctl, cerr := exec.LookPath("journalctl")
	unshare, uerr := exec.LookPath("unshare")
	if jerr != nil || cerr != nil || uerr != nil || os.Geteuid() != 0 {
		if os.Getenv("FLEDGE_REQUIRE_SANDBOX") != "" {
			t.Fatalf("needs root, %s, journalctl and unshare (systemd, util-linux)", journald)
		}
		t.Skip("needs root, systemd-journald, journalctl and unshare")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	path := testPath(t)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	out := filepath.Join(t.TempDir(), "journal.txt")
	// Bounds of 600 looks (30 s and more): journald's start and its taking the writer's
	// messages are real work that a loaded machine slows, seconds at a time.
	script := `set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/journal /run/log
SYSTEMD_LOG_TARGET=console "$JOURNALD" >/dev/null 2>&1 &
jd=$!
i=0; while [ ! -S /run/systemd/journal/socket ]; do i=$((i+1)); [ $i -lt 600 ] || exit 3; sleep 0.05; done
"$WRITER" -test.run='^$'
i=0; until "$JOURNALCTL" -t fledge-audit -o cat --no-pager | grep -q "seq=11 "; do i=$((i+1)); [ $i -lt 600 ] || break; sleep 0.05; done
"$JOURNALCTL" -t fledge-audit -o cat --no-pager > "$OUT"
kill $jd
`
	cmd := exec.Command(unshare, "-m", "-p", "-f", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "JOURNALD="+journald, "JOURNALCTL="+journalctl, "WRITER="+exe, "OUT="+out,
		envWriter+"="+path, envCount+"=20", envWitness+"=journald")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	// The writer makes every 10th record durable (i%10 == 0): seq 1 and 11 are checkpoints.
	h, err := ParseCheckpoints(bytes.NewReader(got), path)
	require.NoError(t, err)
	require.NotNil(t, h, "journal: %q", got)
	assert.Equal(t, uint64(11), h.Seq)
	assert.Equal(t, 2, strings.Count(string(got), "fledge-audit checkpoint v1"), "%s", got)
	head, err := ReadHead(path)
	require.NoError(t, err)
	assert.Equal(t, head.Hash, h.Hash, "the journal holds the head")
	requireOK(t, path, VerifyOptions{Witness: h})

	// The end deleted and the head with it: only the journal knows.
	writeLines(t, path, fileLines(t, path)[:8])
	require.NoError(t, os.Remove(path+HeadSuffix))
	requireOK(t, path, VerifyOptions{})
	requireBroken(t, path, VerifyOptions{Witness: h}, BreakTruncated, "records seq 9..11 are missing")
}
