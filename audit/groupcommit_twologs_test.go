// SPDX-License-Identifier: MIT

package audit

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupCommitTwoLogsOneFile: two Logs on one file (two fledge processes) append durable
// records at once, over rotations, with a slow fsync. Every durable Append that returned nil
// was covered by an fsync that started after its write, and the log verifies: no record of
// one is lost or chained wrongly because of the other's cached tail or its group commit.
func TestGroupCommitTwoLogsOneFile(t *testing.T) {
	path := testPath(t)
	opts := Options{Fsync: FsyncDurable, RotateBytes: 16 << 10, MaxTotalBytes: -1}
	la, err := Open(path, opts)
	require.NoError(t, err)
	lb, err := Open(path, opts)
	require.NoError(t, err)
	w := newSyncWitness(time.Millisecond)
	w.install(la)
	w.install(lb)

	const workers, each = 6, 60
	var wg sync.WaitGroup
	var bad sync.Map
	for g := range workers {
		l := la
		if g%2 == 1 {
			l = lb
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := testRecord(i)
				r.Session = fmt.Sprintf("worker-%d", g)
				r.Details["n"] = i
				switch i % 3 {
				case 0:
					if err := l.Append(r, true); err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
						continue
					}
					if !w.isSynced(r.Hash) {
						bad.Store(r.Session+fmt.Sprint(i), "reported durable before an fsync covered it")
					}
				case 1:
					sync, err := l.AppendDeferredSync(r)
					if err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
						continue
					}
					if err := sync(); err != nil {
						bad.Store(r.Session+fmt.Sprint(i), err.Error())
						continue
					}
					if !w.isSynced(r.Hash) {
						bad.Store(r.Session+fmt.Sprint(i), "deferred: reported durable before an fsync covered it")
					}
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
	require.NoError(t, la.Close())
	require.NoError(t, lb.Close())

	rep, err := Verify(path)
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Break)
	require.Equal(t, workers*each, rep.Records)
	require.Greater(t, len(rep.Files), 2, "the run rotated the log")
}

// TestGroupCommitCloseRace: Close while durable appends (plain and deferred) pile up behind
// a slow fsync. Every one that reported success was covered by an fsync that started after
// its write, and is in the log, which verifies; the rest report ErrClosed or an error.
func TestGroupCommitCloseRace(t *testing.T) {
	for round := range 4 {
		path := testPath(t)
		l, err := Open(path, Options{Fsync: FsyncDurable, RotateBytes: 8 << 10, MaxTotalBytes: -1})
		require.NoError(t, err)
		w := newSyncWitness(time.Millisecond)
		w.install(l)
		var wg sync.WaitGroup
		var okHashes sync.Map
		var bad sync.Map
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					r := testRecord(i)
					r.Session = fmt.Sprintf("w%d", g)
					if i%2 == 0 {
						if err := l.Append(r, true); err != nil {
							return
						}
					} else {
						sync, err := l.AppendDeferredSync(r)
						if err != nil {
							return
						}
						if err := sync(); err != nil {
							return
						}
					}
					if !w.isSynced(r.Hash) {
						bad.Store(r.Hash, fmt.Sprintf("round %d: %s/%d reported durable before an fsync covered it", round, r.Session, i))
					}
					okHashes.Store(r.Hash, true)
				}
			}()
		}
		time.Sleep(time.Duration(5+round*5) * time.Millisecond)
		require.NoError(t, l.Close())
		wg.Wait()
		bad.Range(func(k, v any) bool { t.Error(v); return true })
		rep, err := Verify(path)
		require.NoError(t, err)
		require.True(t, rep.OK, "%v", rep.Break)
		onDisk := map[string]bool{}
		for _, r := range readAll(t, path) {
			onDisk[r.Hash] = true
		}
		okHashes.Range(func(k, _ any) bool {
			if !onDisk[k.(string)] {
				t.Errorf("round %d: a record reported durable is not in the log", round)
			}
			return true
		})
	}
}
