// SPDX-License-Identifier: MIT

package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// diskBytes is the size of every data file of the log (rotated and live).
func diskBytes(t *testing.T, live string) int64 {
	t.Helper()
	rs, err := listRotated(live)
	require.NoError(t, err)
	var n int64
	for _, r := range rs {
		fi, err := os.Stat(r.path)
		require.NoError(t, err)
		n += fi.Size()
	}
	if fi, err := os.Stat(live); err == nil {
		n += fi.Size()
	}
	return n
}

const (
	pruneRotate = 64 << 10
	pruneTotal  = 256 << 10
)

// floodSessions writes `sessions` sessions of `per` ~1 KiB records, each through its own
// Log as separate fledge runs do, checking the bytes on disk after every record.
func floodSessions(t *testing.T, path string, o Options, sessions, per int) (maxSeen int64) {
	t.Helper()
	for s := range sessions {
		l, err := Open(path, o)
		require.NoError(t, err)
		for i := range per {
			r := testRecord(s*per + i)
			r.Details[DetailKey] = strings.Repeat("k", 900)
			require.NoError(t, l.Append(r, false))
			maxSeen = max(maxSeen, diskBytes(t, path))
		}
		require.NoError(t, l.Close())
	}
	return maxSeen
}

// TestPruneKeepsTotalAndVerifies: many sessions against small bounds. What is on disk never
// exceeds MaxTotalBytes, the oldest files go first, each pruning is a log_pruned record, and
// verify proves the chain across what is kept. Positive control: with MaxTotalBytes -1 (the
// old behaviour) the same writes keep everything.
func TestPruneKeepsTotalAndVerifies(t *testing.T) {
	o := Options{Fsync: FsyncNever, RotateBytes: pruneRotate, MaxRecordBytes: MinRecordBytes, MaxTotalBytes: pruneTotal}

	control := testPath(t)
	oc := o
	oc.MaxTotalBytes = -1
	grewTo := floodSessions(t, control, oc, 20, 100)
	assert.Greater(t, grewTo, int64(4*pruneTotal), "control: without the bound the log keeps everything")

	path := testPath(t)
	maxSeen := floodSessions(t, path, o, 20, 100)
	assert.LessOrEqual(t, maxSeen, int64(pruneTotal), "bytes on disk exceeded MaxTotalBytes")

	rs, err := listRotated(path)
	require.NoError(t, err)
	require.NotEmpty(t, rs)
	assert.Greater(t, rs[0].n, uint64(1), "the oldest files were pruned")
	for i := 1; i < len(rs); i++ {
		assert.Equal(t, rs[i-1].n+1, rs[i].n, "only the oldest files are pruned, never one in the middle")
	}

	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "verify across what is kept: %v", rep.Break)
	assert.Positive(t, rep.PrunedThrough)
	assert.Greater(t, rep.PrunedBy, rep.PrunedThrough)
	var pruned int
	for _, r := range readAll(t, path) {
		if r.Event == EventLogPruned {
			pruned++
			assert.Regexp(t, `^[0-9a-f]{64}$`, r.Details[DetailPrunedLastHash])
			assert.NotEmpty(t, r.Details[DetailPrunedFiles])
		}
	}
	assert.Positive(t, pruned, "each pruning is on record")

	// Tampering with what is kept still fails: an edited record in the first kept file ...
	first := rs[0].path
	orig, err := os.ReadFile(first)
	require.NoError(t, err)
	edited := strings.Replace(string(orig), `"event":"exec_decision"`, `"event":"exec_decisioN"`, 1)
	require.NotEqual(t, string(orig), edited)
	require.NoError(t, os.WriteFile(first, []byte(edited), 0o600))
	rep, err = Verify(path)
	require.NoError(t, err)
	assert.False(t, rep.OK)
	assert.Equal(t, BreakEdited, rep.Break.Kind)
	require.NoError(t, os.WriteFile(first, orig, 0o600))

	// ... a kept file deleted by hand from the middle ...
	if len(rs) >= 3 {
		mid := rs[1].path
		b, err := os.ReadFile(mid)
		require.NoError(t, err)
		require.NoError(t, os.Remove(mid))
		rep, err = Verify(path)
		require.NoError(t, err)
		assert.False(t, rep.OK)
		assert.Equal(t, BreakDeleted, rep.Break.Kind)
		require.NoError(t, os.WriteFile(mid, b, 0o600))
	}

	// ... and the oldest kept file deleted by hand: no log_pruned record accounts for it.
	require.NoError(t, os.Rename(first, filepath.Join(t.TempDir(), "aside")))
	rep, err = Verify(path)
	require.NoError(t, err)
	assert.False(t, rep.OK)
	assert.Equal(t, BreakDeleted, rep.Break.Kind)
	assert.Contains(t, rep.Break.Detail, "no log_pruned record accounts for")
}

// TestPruneOptionsValidated: a total bound that cannot hold two rotated files, or without
// rotation, is refused with a clear error.
func TestPruneOptionsValidated(t *testing.T) {
	for _, o := range []Options{
		{RotateBytes: 1 << 20, MaxTotalBytes: 1 << 20},
		{RotateBytes: -1, MaxTotalBytes: 64 << 20},
		{MaxTotalBytes: -2},
		{MaxFieldBytes: 10},
		{MaxListItems: 5000},
	} {
		_, err := Open(testPath(t), o)
		assert.ErrorIs(t, err, ErrInvalidOptions, "%+v", o)
	}
	l := openLog(t, testPath(t), Options{RotateBytes: -1})
	assert.EqualValues(t, -1, l.opts.MaxTotalBytes, "nothing rotates, nothing is pruned")
}

// TestPruneCrashPartWay: a lowered MaxTotalBytes prunes at Open, many files under one
// log_pruned record. A crash after the record and part-way through the deletions (oldest
// first) leaves some of them: the log still verifies, since the record names where each
// file left the chain. A restored middle file with its predecessor gone does not.
func TestPruneCrashPartWay(t *testing.T) {
	path := testPath(t)
	o := Options{Fsync: FsyncNever, RotateBytes: pruneRotate, MaxRecordBytes: MinRecordBytes, MaxTotalBytes: -1}
	floodSessions(t, path, o, 4, 300)
	rs, err := listRotated(path)
	require.NoError(t, err)
	require.Greater(t, len(rs), 4)
	saved := map[string][]byte{}
	for _, r := range rs {
		b, err := os.ReadFile(r.path)
		require.NoError(t, err)
		saved[filepath.Base(r.path)] = b
	}
	o.MaxTotalBytes = pruneTotal
	l := openLog(t, path, o)
	require.NoError(t, l.Close())
	assert.LessOrEqual(t, diskBytes(t, path), int64(pruneTotal))
	var names []string
	for _, r := range readAll(t, path) {
		if r.Event == EventLogPruned {
			for _, n := range r.Details[DetailPrunedFiles].([]any) {
				names = append(names, n.(string))
			}
		}
	}
	require.Greater(t, len(names), 2)
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)

	// The crash: only the oldest file was deleted, the rest of the round is still there.
	dir := filepath.Dir(path)
	for _, n := range names[1:] {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), saved[n], 0o600))
	}
	rep, err = Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK, "a crash part-way through pruning still verifies: %v", rep.Break)

	// Not a crash: a file in the middle of what the record deleted comes back alone.
	for _, n := range names[1:] {
		require.NoError(t, os.Remove(filepath.Join(dir, n)))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, names[1]), saved[names[1]], 0o600))
	rep, err = Verify(path)
	require.NoError(t, err)
	assert.False(t, rep.OK, "a gap after a restored file breaks the chain")
}
