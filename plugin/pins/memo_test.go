// SPDX-License-Identifier: MIT

package pins

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/fledgehq/fledge/internal/filestamp"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckKeptVerdictFollowsTheFile: the verdict Check gives again for inputs it has seen
// is the one a fresh check would give: a pin file edited or replaced on disk, an approval,
// a changed definition or changed instructions all take effect at the very next Check, and
// a caller changing the verdict it got does not change the next one.
func TestCheckKeptVerdictFollowsTheFile(t *testing.T) {
	cfg := t.TempDir()
	file := filepath.Join(cfg, Dir, "fs.json")
	_, err := Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	for range 3 {
		v, err := Check(cfg, "fs", "", defs("reads a file"))
		require.NoError(t, err)
		require.Empty(t, v.Quarantined)
		v.Quarantined["read"] = Change{Tool: "read"} // the caller's copy only
	}
	v, err := Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	require.True(t, v.Allowed("read"))

	// A changed definition: quarantined at once, and again (not fresh) the next time.
	v, err = Check(cfg, "fs", "", defs("reads a file, and ~/.ssh"))
	require.NoError(t, err)
	require.False(t, v.Allowed("read"))
	require.True(t, v.Quarantined["read"].Fresh)
	v, err = Check(cfg, "fs", "", defs("reads a file, and ~/.ssh"))
	require.NoError(t, err)
	require.False(t, v.Allowed("read"))
	require.False(t, v.Quarantined["read"].Fresh)

	// Changed instructions hold everything back.
	v, err = Check(cfg, "fs", "new words", defs("reads a file"))
	require.NoError(t, err)
	require.False(t, v.Allowed("list"))

	v, err = Check(cfg, "fs", "new words", defs("reads a file"))
	require.NoError(t, err)
	require.False(t, v.Allowed("list"))

	// An approval on disk (another fledge process) is seen at the next Check.
	_, err = Approve(cfg, "fs")
	require.NoError(t, err)
	v, err = Check(cfg, "fs", "new words", defs("reads a file"))
	require.NoError(t, err)
	require.Empty(t, v.Quarantined)

	// The file edited by hand, same inputs otherwise: what it says now counts.
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	pf, err := parse(data, "fs", file)
	require.NoError(t, err)
	delete(pf.Tools, "read")
	require.NoError(t, Save(cfg, pf))
	v, err = Check(cfg, "fs", "new words", defs("reads a file"))
	require.NoError(t, err)
	assert.False(t, v.Allowed("read"), "a pin removed on disk is no longer trusted")
	assert.True(t, v.Allowed("list"))

	// Corrupted: nothing is trusted, whatever was kept.
	require.NoError(t, os.WriteFile(file, []byte("{not json"), 0o600))
	v, err = Check(cfg, "fs", "new words", defs("reads a file"))
	require.ErrorIs(t, err, ErrCorrupt)
	assert.False(t, v.Allowed("list"))
}

// TestCheckStampSparesTheReadUntilTheFileChanges: once the pin file has settled, Check does
// not read it again while it is left alone, and an in-place rewrite of the same size (one
// hex digit of a pin changed) or a replacement is seen at the very next Check.
func TestCheckStampSparesTheReadUntilTheFileChanges(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("file stamps vouch for nothing off Linux")
	}
	cfg := t.TempDir()
	file := filepath.Join(cfg, Dir, "fs.json")
	_, err := Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	time.Sleep(filestamp.Settle + 100*time.Millisecond)
	v, err := Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	require.Empty(t, v.Quarantined)
	before := fileReads.Load()
	for range 5 {
		v, err = Check(cfg, "fs", "", defs("reads a file"))
		require.NoError(t, err)
		require.Empty(t, v.Quarantined)
	}
	require.Equal(t, before, fileReads.Load(), "a settled, unchanged pin file is not read again")

	// In place, same size: one hex digit of the read tool's pin.
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	pf, err := parse(data, "fs", file)
	require.NoError(t, err)
	h := pf.Tools["read"].Hash
	flipped := h[:len(h)-1] + map[bool]string{true: "0", false: "1"}[h[len(h)-1] != '0']
	edited := bytes.Replace(data, []byte(h), []byte(flipped), 1)
	require.Len(t, edited, len(data))
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(edited, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	// Settled again before the next Check: only the stamp can tell it changed.
	time.Sleep(filestamp.Settle + 100*time.Millisecond)
	v, err = Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	assert.False(t, v.Allowed("read"), "the rewritten pin no longer matches")
	assert.True(t, v.Allowed("list"))
}

// TestCheckStampVouchesOnceSettled: the usual order of a long-lived host is a Check that
// writes the pin file and another one a moment later, before the file has settled (its
// verdict is kept, but its stamp cannot vouch yet). Once the file has settled, the next
// Check that reads it must let its stamp vouch, so the ones after it are spared the read.
func TestCheckStampVouchesOnceSettled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("file stamps vouch for nothing off Linux")
	}
	cfg := t.TempDir()
	_, err := Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	// At once: kept, not vouched for.
	_, err = Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	time.Sleep(filestamp.Settle + 100*time.Millisecond)
	_, err = Check(cfg, "fs", "", defs("reads a file"))
	require.NoError(t, err)
	before := fileReads.Load()
	for range 3 {
		v, err := Check(cfg, "fs", "", defs("reads a file"))
		require.NoError(t, err)
		require.Empty(t, v.Quarantined)
	}
	assert.Equal(t, before, fileReads.Load(), "a settled, unchanged pin file is read again at every Check")
}
