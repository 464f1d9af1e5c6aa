// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// failingIO makes the next write land only its first half and then fail with EIO (what a
// disk error mid-record looks like), or the next fsync fail, once.
type failingIO struct {
	partialWrite bool
	failSync     bool
	writes       int // writes that failed
	syncs        int // fsyncs that failed
}

func (x *failingIO) install(l *Log) {
	l.io = fileIO{
		write: func(f *os.File, b []byte) (int, error) {
			if !x.partialWrite {
				return f.Write(b)
			}
			x.partialWrite = false
			x.writes++
			n, err := f.Write(b[:len(b)/2])
			if err != nil {
				return n, err
			}
			return n, unix.EIO
		},
		sync: func(f *os.File) error {
			if !x.failSync {
				return f.Sync()
			}
			x.failSync = false
			x.syncs++
			return unix.EIO
		},
	}
}

// requireWholeLog checks the log holds exactly want (the bytes before the failed append)
// and verifies with n records and no recovery: the failed append left nothing behind.
func requireWholeLog(t *testing.T, path string, want []byte, n int) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "the log is back to its last whole record")
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, n, rep.Records)
	assert.Zero(t, rep.RecoveredCount, "nothing torn was left to recover")
}

// requireContinues appends one more record and checks it continues the chain from the
// last good record.
func requireContinues(t *testing.T, l *Log, path string, n int) {
	t.Helper()
	recs := readAll(t, path)
	require.Len(t, recs, n)
	r := testRecord(100)
	require.NoError(t, l.Append(r, true))
	assert.Equal(t, uint64(n+1), r.Seq)
	assert.Equal(t, recs[n-1].Hash, r.PrevHash)
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, n+1, rep.Records)
	assert.Zero(t, rep.RecoveredCount)
	for _, rec := range readAll(t, path) {
		assert.NotEqual(t, EventLogRecovered, rec.Event)
	}
}

func TestFailedAppendIsRolledBack(t *testing.T) {
	tests := []struct {
		name     string
		fsync    FsyncPolicy
		durable  bool
		fail     failingIO
		deferred bool // through AppendDeferredSync
	}{
		{"partial write, no fsync", FsyncNever, false, failingIO{partialWrite: true}, false},
		{"partial write, durable record", FsyncDurable, true, failingIO{partialWrite: true}, false},
		{"partial write, fsync always", FsyncAlways, false, failingIO{partialWrite: true}, false},
		{"fsync fails after a whole write", FsyncDurable, true, failingIO{failSync: true}, false},
		{"fsync always fails after a whole write", FsyncAlways, false, failingIO{failSync: true}, false},
		{"deferred: partial write", FsyncDurable, true, failingIO{partialWrite: true}, true},
		{"deferred: background fsync fails", FsyncDurable, true, failingIO{failSync: true}, true},
		{"deferred under always: fsync fails", FsyncAlways, true, failingIO{failSync: true}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			l := openLog(t, path, Options{Fsync: tc.fsync, RotateBytes: -1})
			appendN(t, l, 3)
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			fail := tc.fail
			fail.install(l)
			r := testRecord(9)
			if tc.deferred {
				var sync func() error
				sync, err = l.AppendDeferredSync(r)
				if err == nil {
					err = sync()
					assert.Equal(t, err, sync(), "the wait gives the same answer twice")
				}
			} else {
				err = l.Append(r, tc.durable)
			}
			require.ErrorIs(t, err, unix.EIO)
			assert.Equal(t, tc.fail.partialWrite, fail.writes == 1, "the partial write happened")
			assert.Equal(t, tc.fail.failSync, fail.syncs == 1, "the failing fsync happened")
			if !tc.deferred || tc.fail.partialWrite {
				assert.Zero(t, r.Seq, "a failed append leaves the record untouched")
				assert.Empty(t, r.Hash)
			}
			requireWholeLog(t, path, before, 3)
			requireContinues(t, l, path, 3)
		})
	}
}

// A deferred fsync that fails after another record chained to its record cannot take it
// back without breaking the chain: the record stays, whole, and the log verifies.
func TestDeferredSyncFailureAfterLaterRecordKeepsChain(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{RotateBytes: -1})
	appendN(t, l, 2)
	// The background fsync waits for this gate, then fails; later ones succeed.
	gate := make(chan struct{})
	var syncs atomic.Int32
	l.io = fileIO{sync: func(f *os.File) error {
		if syncs.Add(1) == 1 {
			<-gate
			return unix.EIO
		}
		return f.Sync()
	}}
	r := testRecord(9)
	sync, err := l.AppendDeferredSync(r)
	require.NoError(t, err)
	require.NoError(t, l.Append(testRecord(10), false))
	close(gate)
	require.ErrorIs(t, sync(), unix.EIO)

	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, 4, rep.Records, "both records stay")
	requireContinues(t, l, path, 4)
}

// The first write into a fresh live file (just after rotation) fails: the live file goes
// back to empty and the chain still continues from the rotated file.
func TestFailedAppendAfterRotation(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{RotateBytes: 1, Fsync: FsyncNever})
	appendN(t, l, 2) // each append rotates: two rotated files, no live file yet
	rs, err := listRotated(path)
	require.NoError(t, err)
	require.Len(t, rs, 2)

	fail := failingIO{partialWrite: true}
	fail.install(l)
	require.ErrorIs(t, l.Append(testRecord(9), false), unix.EIO)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Zero(t, fi.Size(), "the live file is back to empty")
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, 2, rep.Records)

	r := testRecord(10)
	require.NoError(t, l.Append(r, false))
	assert.Equal(t, uint64(3), r.Seq)
	rep, err = Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, 3, rep.Records)
}

// The recovery of a crash's torn tail fails part-way: the rollback keeps the torn bytes
// (they are the crash's evidence) and the next append recovers them properly.
func TestFailedRecoveryKeepsTornBytes(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{RotateBytes: -1})
	appendN(t, l, 3)
	torn := []byte(`{"schema":1,"seq":4,"ti`)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(torn)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	fail := failingIO{partialWrite: true}
	fail.install(l)
	require.ErrorIs(t, l.Append(testRecord(9), false), unix.EIO)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(before), string(got), "back to the torn state, no half recovery")

	r := testRecord(10)
	require.NoError(t, l.Append(r, false))
	assert.Equal(t, uint64(5), r.Seq, "log_recovered is seq 4")
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	assert.Equal(t, 5, rep.Records)
	assert.Equal(t, 1, rep.RecoveredCount)
	recs := readAll(t, path)
	assert.Equal(t, EventLogRecovered, recs[3].Event)
	assert.True(t, bytes.Contains(mustRead(t, path), torn), "the torn bytes are kept")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
