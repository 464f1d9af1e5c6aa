// SPDX-License-Identifier: MIT

package audit

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// Group commit. A record that must be on disk before Append returns is written under the
// log's lock, and then synced outside it: the appender joins the group of records waiting
// for an fsync. If no fsync is running it runs one itself, for every record written before
// it started; if one is running, it waits for it to end and then leads the next one (the
// running fsync may have started before its record was written, so it does not count). So
// concurrent durable appends share fsyncs, and appends of any kind go on while one runs,
// instead of each waiting its turn behind the lock for a whole disk flush.
//
// A record is reported durable only by an fsync that started after its write(2) returned:
// a waiter is added to the group under the lock, after its write, and a leader takes the
// group as it stands when it starts its fsync. The file the group was written to is never
// closed under a running fsync: whoever closes it (a rotation, a reopen after another
// process rotated, Close) first waits for the running fsync, then syncs and answers the
// waiters still queued on that file itself (retire).

// syncWaiter is one record waiting to be on disk.
type syncWaiter struct {
	f *os.File
	// epoch is the record's place in the cross-process count (groupshare_linux.go), 0 if none.
	epoch uint64
	done  bool
	err   error
	pos   chainPos
	t     time.Time
}

type groupSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*syncWaiter // written, not yet in a running fsync
	syncing bool          // a leader's fsync is running (outside the log's lock)
}

func (g *groupSync) init() {
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
}

// enqueue adds the record just written to f (at pos, written at t; fi its fstat after the
// write, nil if unknown) to the next group. Called under the log's lock, after the write
// returned.
func (l *Log) enqueueSync(f *os.File, fi os.FileInfo, pos chainPos, t time.Time) *syncWaiter {
	var epoch uint64
	if fi != nil {
		epoch = l.share.wrote(fileKey(fi))
	}
	w := &syncWaiter{f: f, pos: pos, t: t, epoch: epoch}
	l.gs.mu.Lock()
	l.gs.init()
	l.gs.queue = append(l.gs.queue, w)
	l.gs.mu.Unlock()
	return w
}

// waitSynced returns once w's record is on disk (nil) or its fsync failed. Called without
// the log's lock. When w is answered by an fsync this goroutine led, the head advances to
// the newest record of that group before it returns.
func (l *Log) waitSynced(w *syncWaiter) error {
	g := &l.gs
	g.mu.Lock()
	for !w.done {
		if g.syncing {
			g.cond.Wait()
			continue
		}
		// Lead: everything queued now was written before this fsync starts. The queue
		// holds records of one file only (retire empties it before that file is closed).
		batch := g.queue
		if len(batch) == 0 {
			// Not possible: w is queued until a leader or retire takes it, and both
			// answer it before they clear syncing. Wait rather than sync nothing.
			g.cond.Wait()
			continue
		}
		g.queue = nil
		g.syncing = true
		g.mu.Unlock()
		// Another process's fsync may cover the batch, or be running: syncFor waits for it
		// rather than flushing the file a second time.
		err := l.syncFor(batch[0].f, batchEpoch(batch))
		if err != nil {
			err = fmt.Errorf("audit: fsync %s: %w", l.path, err)
		}
		g.mu.Lock()
		for _, b := range batch {
			b.done, b.err = true, err
		}
		g.syncing = false
		g.cond.Broadcast()
		if err == nil {
			newest := batch[len(batch)-1]
			g.mu.Unlock()
			l.headAfterSync(newest.pos, newest.t)
			g.mu.Lock()
		}
	}
	g.mu.Unlock()
	return w.err
}

// batchEpoch is the newest record's place in the cross-process count, 0 when any record of
// the batch has none (then the batch is synced by this process alone).
func batchEpoch(batch []*syncWaiter) uint64 {
	var e uint64
	for _, w := range batch {
		if w.epoch == 0 {
			return 0
		}
		e = max(e, w.epoch)
	}
	return e
}

// headAfterSync moves the head to pos once its group is on disk (the head never names a
// record that is not).
func (l *Log) headAfterSync(pos chainPos, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	_ = l.locked(func() error { l.advanceHeadLate(pos, t); return nil })
}

// retire is called under the log's lock before f (the live file) is closed: it waits for a
// running fsync, then syncs f for the records still queued on it and answers them, and
// moves the head to the newest of them.
func (l *Log) retire(f *os.File) { l.retireWith(f, true) }

// retireNoHead is retire for Close when the cross-process lock could not be had: the
// waiters are still answered, the head is left where it is (it only lags).
func (l *Log) retireNoHead(f *os.File) { l.retireWith(f, false) }

func (l *Log) retireWith(f *os.File, head bool) {
	g := &l.gs
	g.mu.Lock()
	g.init()
	for g.syncing {
		g.cond.Wait()
	}
	var batch, rest []*syncWaiter
	for _, w := range g.queue {
		if w.f == f {
			batch = append(batch, w)
		} else {
			rest = append(rest, w)
		}
	}
	g.queue = rest
	if len(batch) == 0 {
		g.mu.Unlock()
		return
	}
	// This is the running fsync now: a waiter of the batch must not lead one of its own.
	g.syncing = true
	g.mu.Unlock()
	err := l.io.syncFile(f)
	if err != nil {
		err = fmt.Errorf("audit: fsync %s: %w", l.path, err)
	}
	g.mu.Lock()
	for _, w := range batch {
		w.done, w.err = true, err
	}
	g.syncing = false
	g.cond.Broadcast()
	g.mu.Unlock()
	if err == nil && head {
		// Under the lock already (and the flock).
		newest := batch[len(batch)-1]
		l.advanceHeadLate(newest.pos, newest.t)
	}
}

// closeLive closes the live file after retire.
func (l *Log) closeLive() error {
	if l.f == nil {
		return nil
	}
	l.retire(l.f)
	err := l.f.Close()
	l.f = nil
	l.tail = nil // the cache names the file just closed
	return err
}
