// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// durableN appends n records, each durable (as plugin_exit and exec decisions are).
func durableN(t testing.TB, l *Log, n int) []*Record {
	t.Helper()
	out := make([]*Record, n)
	for i := range out {
		out[i] = testRecord(i)
		require.NoError(t, l.Append(out[i], true))
	}
	return out
}

func requireBroken(t *testing.T, path string, o VerifyOptions, kind BreakKind, detail string) *VerifyReport {
	t.Helper()
	rep, err := VerifyWith(path, o)
	require.NoError(t, err)
	require.False(t, rep.OK, "verify must fail")
	require.NotNil(t, rep.Break)
	assert.Equal(t, kind, rep.Break.Kind, "%v", rep.Break)
	assert.Contains(t, rep.Break.Detail, detail)
	return rep
}

func requireOK(t *testing.T, path string, o VerifyOptions) *VerifyReport {
	t.Helper()
	rep, err := VerifyWith(path, o)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	return rep
}

// TestHeadCatchesTruncation: records deleted from the end of the log leave a valid, shorter
// chain; the head beside the log says how far it reached, so verify reports the missing seqs.
func TestHeadCatchesTruncation(t *testing.T) {
	tests := []struct {
		name   string
		cut    func(lines [][]byte) [][]byte
		detail string
	}{
		{"last record", func(ls [][]byte) [][]byte { return ls[:9] }, "record seq 10 is missing"},
		{"last 3 records", func(ls [][]byte) [][]byte { return ls[:7] }, "records seq 8..10 are missing"},
		{"mid-record", func(ls [][]byte) [][]byte {
			return append(ls[:9:9], ls[9][:len(ls[9])/2])
		}, "record seq 10 is missing"},
		{"whole log emptied", func(ls [][]byte) [][]byte { return nil }, "records seq 1..10 are missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			l := openLog(t, path, Options{})
			durableN(t, l, 10)
			require.NoError(t, l.Close())
			requireOK(t, path, VerifyOptions{})
			h, err := ReadHead(path)
			require.NoError(t, err)
			require.NotNil(t, h)
			assert.Equal(t, uint64(10), h.Seq)

			lines := fileLines(t, path)
			writeLines(t, path, tc.cut(lines[:10]))
			rep := requireBroken(t, path, VerifyOptions{}, BreakTruncated, tc.detail)
			assert.Contains(t, rep.Break.Detail, "says seq 10 was written")

			// The next writer finds it too, and keeps the gap in the chain: deleting the
			// head afterwards does not make the log pass.
			l2 := openLog(t, path, Options{})
			require.NoError(t, l2.Append(testRecord(99), true))
			require.NoError(t, l2.Close())
			var tr *Record
			for _, r := range readAll(t, path) {
				if r.Event == EventLogTruncated {
					tr = r
				}
			}
			require.NotNil(t, tr, "a log_truncated record")
			assert.Equal(t, uint64(11), tr.Seq, "the chain goes on from the head")
			assert.Equal(t, h.Hash, tr.PrevHash)
			assert.Equal(t, Error, tr.Decision)
			require.NoError(t, os.Remove(path+HeadSuffix))
			rep, err = Verify(path)
			require.NoError(t, err)
			assert.False(t, rep.OK, "the gap stays in the chain")
		})
	}
}

// TestHeadEndReplaced: the last record replaced by another valid record (re-chained) is
// caught by the hash the head names.
func TestHeadEndReplaced(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	durableN(t, l, 5)
	require.NoError(t, l.Close())
	lines := fileLines(t, path)
	head, err := os.ReadFile(path + HeadSuffix)
	require.NoError(t, err)
	// Drop record 5 and write another record 5 through the writer (it chains correctly),
	// then put the head back as it was.
	writeLines(t, path, lines[:4])
	require.NoError(t, os.Remove(path+HeadSuffix))
	l2 := openLog(t, path, Options{})
	require.NoError(t, l2.Append(testRecord(7), true))
	require.NoError(t, l2.Close())
	requireOK(t, path, VerifyOptions{}) // a rewritten head cannot tell: the witness can
	require.NoError(t, os.WriteFile(path+HeadSuffix, head, 0o600))
	requireBroken(t, path, VerifyOptions{}, BreakTruncated, "the end of the log was replaced")
}

// TestHeadNoFalseAlarms: normal runs (durable and not), rotation, pruning, a log from
// before the head existed and a fresh install all verify.
func TestHeadNoFalseAlarms(t *testing.T) {
	t.Run("mixed durable and buffered", func(t *testing.T) {
		path := testPath(t)
		l := openLog(t, path, Options{})
		durableN(t, l, 3)
		appendN(t, l, 4) // not durable: the head stays at seq 3
		h, err := ReadHead(path)
		require.NoError(t, err)
		assert.Equal(t, uint64(3), h.Seq)
		rep := requireOK(t, path, VerifyOptions{})
		assert.Equal(t, 7, rep.Records)
		assert.Equal(t, uint64(3), rep.Head.Seq)
	})
	t.Run("several processes", func(t *testing.T) {
		path := testPath(t)
		a := openLog(t, path, Options{})
		b := openLog(t, path, Options{})
		for i := 0; i < 6; i++ {
			require.NoError(t, a.Append(testRecord(i), true))
			require.NoError(t, b.Append(testRecord(i), i%2 == 0))
		}
		rep := requireOK(t, path, VerifyOptions{})
		assert.Equal(t, uint64(11), rep.Head.Seq, "the last durable record")
	})
	t.Run("rotation", func(t *testing.T) {
		path := testPath(t)
		l := openLog(t, path, Options{RotateBytes: 4096, MaxTotalBytes: -1})
		durableN(t, l, 60)
		rs, err := listRotated(path)
		require.NoError(t, err)
		require.Greater(t, len(rs), 2)
		rep := requireOK(t, path, VerifyOptions{})
		assert.Equal(t, uint64(60), rep.Head.Seq)
	})
	t.Run("prune", func(t *testing.T) {
		path := testPath(t)
		o := Options{RotateBytes: MinRecordBytes, MaxRecordBytes: MinRecordBytes, MaxTotalBytes: 5 * MinRecordBytes}
		l := openLog(t, path, o)
		pad := strings.Repeat("p", 2000)
		for i := 0; i < 200; i++ {
			r := testRecord(i)
			r.Details["pad"] = pad
			require.NoError(t, l.Append(r, i%3 == 0))
		}
		rep := requireOK(t, path, VerifyOptions{})
		require.Positive(t, rep.PrunedThrough, "files were pruned")
		assert.GreaterOrEqual(t, rep.Head.Seq, uint64(199))
	})
	t.Run("log from before the head", func(t *testing.T) {
		path := testPath(t)
		l := openLog(t, path, Options{})
		durableN(t, l, 3)
		require.NoError(t, l.Close())
		require.NoError(t, os.Remove(path+HeadSuffix))
		rep := requireOK(t, path, VerifyOptions{})
		assert.Nil(t, rep.Head)
		l2 := openLog(t, path, Options{})
		durableN(t, l2, 1)
		rep = requireOK(t, path, VerifyOptions{})
		assert.Equal(t, uint64(4), rep.Head.Seq)
	})
	t.Run("fresh install", func(t *testing.T) {
		path := testPath(t)
		_, err := Verify(path)
		require.ErrorIs(t, err, ErrNoLog)
		l := openLog(t, path, Options{})
		require.NoError(t, l.Close())
		rep := requireOK(t, path, VerifyOptions{}) // opened, nothing written
		assert.Zero(t, rep.Records)
	})
	t.Run("torn tail after the head is a crash", func(t *testing.T) {
		path := testPath(t)
		l := openLog(t, path, Options{})
		durableN(t, l, 3)
		appendN(t, l, 1)
		require.NoError(t, l.Close())
		lines := fileLines(t, path)
		writeLines(t, path, append(lines[:3:3], lines[3][:20]))
		requireBroken(t, path, VerifyOptions{}, BreakTornTail, "crash")
		l2 := openLog(t, path, Options{})
		durableN(t, l2, 1)
		rep := requireOK(t, path, VerifyOptions{})
		assert.Equal(t, 1, rep.RecoveredCount)
	})
}

// TestHeadRollback: a record whose fsync failed is taken back, and so is the head: the log
// is not shorter than its head afterwards.
func TestHeadRollback(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	durableN(t, l, 3)
	x := &failingIO{failSync: true}
	x.install(l)
	sync, err := l.AppendDeferredSync(testRecord(3))
	require.NoError(t, err)
	require.Error(t, sync())
	h, err := ReadHead(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), h.Seq)
	requireOK(t, path, VerifyOptions{})

	// A deferred sync that succeeds moves the head.
	sync, err = l.AppendDeferredSync(testRecord(4))
	require.NoError(t, err)
	require.NoError(t, sync())
	h, err = ReadHead(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), h.Seq)
	requireOK(t, path, VerifyOptions{})
}

// TestHeadTornSlot: a write torn inside one slot leaves the other, one append behind;
// both slots overwritten is reported.
func TestHeadTornSlot(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	durableN(t, l, 4)
	require.NoError(t, l.Close())
	b, err := os.ReadFile(path + HeadSuffix)
	require.NoError(t, err)
	require.Len(t, b, 2*headSlotBytes)
	torn := bytes.Clone(b)
	copy(torn[10:], "garbage") // slot 0 holds seq 4
	require.NoError(t, os.WriteFile(path+HeadSuffix, torn, 0o600))
	h, err := ReadHead(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), h.Seq)
	requireOK(t, path, VerifyOptions{})

	copy(torn[headSlotBytes+10:], "garbage")
	require.NoError(t, os.WriteFile(path+HeadSuffix, torn, 0o600))
	requireBroken(t, path, VerifyOptions{}, BreakBadHead, "no valid slot")
}

// TestWitnessCatchesRewrittenHead: a user who truncates the log and rewrites (or deletes)
// the head passes verify on the head alone; the witness's checkpoint still catches it.
func TestWitnessCatchesRewrittenHead(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "checkpoints")
	prog := filepath.Join(dir, "witness.sh")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\ncat >> "+store+"\n"), 0o700))
	w, err := ParseWitness("exec:" + prog)
	require.NoError(t, err)

	path := testPath(t)
	l := openLog(t, path, Options{Witness: w})
	durableN(t, l, 6)
	require.NoError(t, l.Close())
	got, err := os.ReadFile(store)
	require.NoError(t, err)
	h, err := ParseCheckpoints(bytes.NewReader(got), path)
	require.NoError(t, err)
	require.NotNil(t, h, "checkpoint in %q", got)
	assert.Equal(t, uint64(6), h.Seq)
	requireOK(t, path, VerifyOptions{Witness: h})

	writeLines(t, path, fileLines(t, path)[:4])
	require.NoError(t, os.Remove(path+HeadSuffix))
	requireOK(t, path, VerifyOptions{}) // what the user can hide without a witness
	requireBroken(t, path, VerifyOptions{Witness: h}, BreakTruncated, "records seq 5..6 are missing")

	// The whole log deleted, head too.
	require.NoError(t, os.Remove(path))
	requireBroken(t, path, VerifyOptions{Witness: h}, BreakTruncated, "records seq 1..6 are missing")
}

func TestParseWitness(t *testing.T) {
	for _, ok := range []string{"", "journald", "syslog", "syslog:/tmp/x.sock", "journald:/run/j", "exec:/usr/bin/logger -t x"} {
		_, err := ParseWitness(ok)
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"sylog", "exec:", "exec:relative/prog", "http://x"} {
		_, err := ParseWitness(bad)
		assert.ErrorIs(t, err, ErrWitness, bad)
	}
}

func TestParseCheckpoints(t *testing.T) {
	in := `Nov 26 18:00:00 host fledge-audit[12]: fledge-audit checkpoint v1 log="/a b/audit.jsonl" seq=7 hash=` + ZeroHash + ` time=2026-11-26T18:00:00Z
noise
fledge-audit checkpoint v1 log="/a b/audit.jsonl" seq=9 hash=` + strings.Repeat("a", 64) + ` time=2026-11-26T18:00:01Z
fledge-audit checkpoint v1 log="/other/audit.jsonl" seq=99 hash=` + ZeroHash + ` time=2026-11-26T18:00:01Z
fledge-audit checkpoint v1 log="/a b/audit.jsonl" seq=x hash=` + ZeroHash + ` time=2026-11-26T18:00:01Z
`
	h, err := ParseCheckpoints(strings.NewReader(in), "/a b/audit.jsonl")
	require.NoError(t, err)
	require.NotNil(t, h)
	assert.Equal(t, uint64(9), h.Seq)
	assert.Equal(t, strings.Repeat("a", 64), h.Hash)
}

// TestWitnessUnreachable: a witness that cannot be reached does not cost a record; the
// failure is reported once per Log, and the head still advances.
func TestWitnessUnreachable(t *testing.T) {
	w, err := ParseWitness("syslog:" + filepath.Join(t.TempDir(), "no.sock"))
	require.NoError(t, err)
	var warned []error
	path := testPath(t)
	l := openLog(t, path, Options{Witness: w, WitnessError: func(err error) { warned = append(warned, err) }})
	durableN(t, l, 3)
	require.Len(t, warned, 1)
	assert.ErrorIs(t, warned[0], ErrWitness)
	var b bytes.Buffer
	WarnWitness(&b)(warned[0])
	assert.Contains(t, b.String(), "the audit record was written")
	h, err := ReadHead(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), h.Seq)
	assert.Len(t, readAll(t, path), 3)
}
