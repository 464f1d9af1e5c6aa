// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// syncWitness watches every fsync of a log: at the start of each it reads which records
// the file holds (by hash), and once the fsync returned nil those records count as on
// disk. A record an Append reported durable must be among them by then.
type syncWitness struct {
	mu     sync.Mutex
	synced map[string]bool
	calls  int
	failAt map[int]bool // fsync calls (1-based) that fail with EIO instead
	failed int
	delay  time.Duration
}

func newSyncWitness(delay time.Duration) *syncWitness {
	return &syncWitness{synced: map[string]bool{}, failAt: map[int]bool{}, delay: delay}
}

func (w *syncWitness) install(l *Log) {
	l.io = fileIO{sync: func(f *os.File) error {
		// What the file holds now, before the flush starts: only these can it make durable.
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		buf := make([]byte, fi.Size())
		if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
			return err
		}
		var hashes []string
		for _, ln := range bytes.Split(buf, []byte("\n")) {
			if _, h, ok := splitHash(ln); ok {
				hashes = append(hashes, h)
			}
		}
		w.mu.Lock()
		w.calls++
		fail := w.failAt[w.calls]
		w.mu.Unlock()
		time.Sleep(w.delay) // a slow disk: appends pile up behind the flush
		if fail {
			w.mu.Lock()
			w.failed++
			w.mu.Unlock()
			return unix.EIO
		}
		if err := f.Sync(); err != nil {
			return err
		}
		w.mu.Lock()
		for _, h := range hashes {
			w.synced[h] = true
		}
		w.mu.Unlock()
		return nil
	}}
}

func (w *syncWitness) isSynced(hash string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced[hash]
}

// TestGroupCommitNeverReportsUnsyncedRecords: many goroutines append durable records (and
// ordinary ones, and exec decisions with a deferred sync) at once, over rotations, with a
// slow fsync so they pile up. Every durable Append that returned nil had its record in the
// file when an fsync started that succeeded before Append returned; fewer fsyncs than
// durable records ran (they were shared); and the log on disk verifies, every goroutine's
// records in its own order, the head at the last record.
func TestGroupCommitNeverReportsUnsyncedRecords(t *testing.T) {
	path := testPath(t)
	l, err := Open(path, Options{Fsync: FsyncDurable, RotateBytes: 64 << 10, MaxTotalBytes: -1})
	require.NoError(t, err)
	w := newSyncWitness(2 * time.Millisecond)
	w.install(l)

	const workers, each = 8, 60
	var wg sync.WaitGroup
	var bad sync.Map
	var maxDurable sync.Mutex
	lastDurable := uint64(0)
	durable := 0
	for g := range workers {
		for i := range each {
			if i%3 != 2 {
				durable++
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := testRecord(i)
				r.Session = fmt.Sprintf("worker-%d", g)
				r.Details["n"] = i
				switch i % 3 {
				case 0, 1:
					if err := l.Append(r, true); err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
						continue
					}
					if !w.isSynced(r.Hash) {
						bad.Store(r.Session+fmt.Sprint(i), "reported durable before an fsync covered it")
					}
					maxDurable.Lock()
					lastDurable = max(lastDurable, r.Seq)
					maxDurable.Unlock()
				case 2:
					if err := l.Append(r, false); err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
					}
				}
			}
		}()
	}
	wg.Wait()
	bad.Range(func(k, v any) bool { t.Errorf("%v: %v", k, v); return true })
	require.NoError(t, l.Close())

	t.Logf("%d durable records, %d fsyncs", durable, w.calls)
	assert.Less(t, w.calls, durable, "concurrent durable appends share fsyncs")

	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	require.Equal(t, workers*each, rep.Records)
	require.Greater(t, len(rep.Files), 2, "the run rotated the log")
	require.NotNil(t, rep.Head)
	assert.GreaterOrEqual(t, rep.Head.Seq, lastDurable, "the head reached the last durable record")

	last := map[string]int{}
	for _, r := range readAll(t, path) {
		n, err := r.Details["n"].(interface{ Int64() (int64, error) }).Int64()
		require.NoError(t, err)
		prev, seen := last[r.Session]
		if seen {
			require.Greater(t, int(n), prev, "%s: records out of order", r.Session)
		}
		last[r.Session] = int(n)
	}
	require.Len(t, last, workers)
}

// TestGroupCommitFailedFsyncFailsItsGroup: when the fsync a group waits for fails, every
// Append in that group returns the error (none is reported durable), the log still
// verifies, and later appends go on.
func TestGroupCommitFailedFsyncFailsItsGroup(t *testing.T) {
	path := testPath(t)
	l, err := Open(path, Options{Fsync: FsyncDurable})
	require.NoError(t, err)
	w := newSyncWitness(3 * time.Millisecond)
	w.failAt[2] = true
	w.failAt[3] = true
	w.install(l)

	const workers = 6
	var mu sync.Mutex
	var failed, ok int
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				r := testRecord(g*100 + i)
				err := l.Append(r, true)
				mu.Lock()
				if err != nil {
					failed++
					assert.ErrorIs(t, err, unix.EIO)
				} else {
					ok++
					assert.True(t, w.isSynced(r.Hash), "record %d reported durable, not synced", r.Seq)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 2, w.failed)
	require.Positive(t, failed, "the appends of the failed fsyncs were told")
	require.Positive(t, ok)
	r := testRecord(999)
	require.NoError(t, l.Append(r, true))
	require.NoError(t, l.Close())
	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	// A failed record is taken back when it is still the file's last; the rest stay whole
	// (their callers were told, and did not act).
	assert.GreaterOrEqual(t, rep.Records, ok+1)
}

// Exec decisions (AppendDeferredSync) join the group commit too: many written at once (a
// plugin's pipelined execs) share fsyncs, and each wait returns only once an fsync that
// started after its record was written succeeded. Before, each had a flush of its own.
func TestDeferredSyncsShareGroupCommit(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{RotateBytes: -1})
	w := newSyncWitness(20 * time.Millisecond)
	w.install(l)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := testRecord(100 + i)
			wait, err := l.AppendDeferredSync(r)
			if err != nil {
				errs <- err
				return
			}
			if err := wait(); err != nil {
				errs <- err
				return
			}
			if !w.isSynced(r.Hash) {
				errs <- fmt.Errorf("record %d reported durable before an fsync covered it", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	w.mu.Lock()
	calls := w.calls
	w.mu.Unlock()
	assert.Less(t, calls, n, "%d decisions, %d fsyncs: they were not shared", n, calls)
	rep, err := Verify(path)
	require.NoError(t, err)
	assert.True(t, rep.OK, "%+v", rep.Break)
	assert.Equal(t, n, rep.Records)
}
