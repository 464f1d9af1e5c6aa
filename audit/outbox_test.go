// SPDX-License-Identifier: MIT

package audit

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readChunks reads the log after pos in chunks of n records, each chunk from the position
// the previous one ended at, as the exporter does, and returns every seq read.
func readChunks(t *testing.T, path string, pos Position, n int) ([]uint64, Position) {
	t.Helper()
	var seqs []uint64
	for {
		got := 0
		gap, err := ReadAfter(path, pos, func(e Entry) error {
			if got == n {
				return ErrStopRead
			}
			got++
			seqs = append(seqs, e.Record.Seq)
			pos = e.Pos
			return nil
		})
		require.NoError(t, err)
		require.Nil(t, gap)
		if got == 0 {
			return seqs, pos
		}
	}
}

// A position resumes exactly after its record, across rotations that happen between reads
// (the live file renamed: its inode finds the place), with nothing read twice or skipped.
func TestReadAfterResumesAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{Fsync: FsyncNever, RotateBytes: 4096, MaxTotalBytes: -1})
	require.NoError(t, err)
	defer l.Close()
	write := func(n int) {
		for i := 0; i < n; i++ {
			require.NoError(t, l.Append(&Record{Event: EventExecDecision, Decision: Allow, Reason: "ok", Session: "s"}, false))
		}
	}
	write(100)
	seqs, pos := readChunks(t, path, Position{}, 7)
	require.Len(t, seqs, 100)
	// The file the position names rotates away under it; more records follow.
	write(150)
	rs, err := listRotated(path)
	require.NoError(t, err)
	require.Greater(t, len(rs), 3, "nothing rotated: the test proves nothing")
	more, _ := readChunks(t, path, pos, 13)
	seqs = append(seqs, more...)
	require.Len(t, seqs, 250)
	for i, s := range seqs {
		require.EqualValues(t, i+1, s)
	}
}

// A position whose records were pruned reports the gap, then reads on from the oldest kept.
func TestReadAfterReportsPrunedGap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{Fsync: FsyncNever, RotateBytes: 4096, MaxRecordBytes: MinRecordBytes, MaxTotalBytes: 2 * (4096 + MinRecordBytes)})
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < 5; i++ {
		require.NoError(t, l.Append(&Record{Event: EventExecDecision, Decision: Allow, Reason: "ok"}, false))
	}
	_, pos := readChunks(t, path, Position{}, 100)
	require.EqualValues(t, 5, pos.Seq)
	for i := 0; i < 600; i++ {
		require.NoError(t, l.Append(&Record{Event: EventExecDecision, Decision: Allow, Reason: "ok"}, false))
	}
	var first uint64
	gap, err := ReadAfter(path, pos, func(e Entry) error { first = e.Record.Seq; return ErrStopRead })
	require.NoError(t, err)
	require.NotNil(t, gap)
	require.EqualValues(t, 6, gap.First)
	require.Equal(t, first-1, gap.Last)
}

// One sender at a time: a second outbox waits, then is told another process sends.
func TestOutboxIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := AcquireOutbox(path, 0)
	require.NoError(t, err)
	_, err = AcquireOutbox(path, 50*time.Millisecond)
	require.True(t, errors.Is(err, ErrOutboxBusy), "%v", err)
	require.NoError(t, a.Ack(Position{Seq: 9, Hash: "h"}))
	a.Release()
	b, err := AcquireOutbox(path, 0)
	require.NoError(t, err)
	defer b.Release()
	c, err := b.Cursor()
	require.NoError(t, err)
	require.EqualValues(t, 9, c.Seq)
}

func TestReadAfterCursorAhead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{Fsync: FsyncNever})
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < 3; i++ {
		require.NoError(t, l.Append(&Record{Event: EventExecDecision, Decision: Allow, Reason: "ok"}, false))
	}
	_, err = ReadAfter(path, Position{Seq: 50}, func(Entry) error { return nil })
	require.ErrorIs(t, err, ErrCursorAhead)
}
