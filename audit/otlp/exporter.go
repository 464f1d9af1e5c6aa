// SPDX-License-Identifier: MIT

package otlp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fledgehq/fledge/audit"
)

const (
	// DefaultInterval is how often a long-running process looks for records to send.
	DefaultInterval = time.Second
	// DefaultExitWait bounds what a process waits, when it closes, for its records (and any
	// backlog) to be acknowledged; the rest is left to the next process.
	DefaultExitWait = 2 * time.Second
	// minBackoff and maxBackoff bound the wait after a failed send (doubling, with jitter).
	minBackoff = 500 * time.Millisecond
	maxBackoff = time.Minute
)

// Options of an Exporter.
type Options struct {
	// Append writes a record to the log (the export_gap record); nil: gaps are only warned.
	Append func(*audit.Record) error
	// Warn is told what goes wrong (once per kind until it works again); nil: silent.
	Warn func(string)
	// Interval between looks for new records; 0 = DefaultInterval.
	Interval time.Duration
}

// Exporter sends a log's records in the background, from its cursor on.
type Exporter struct {
	path   string
	client *Client
	opts   Options

	mu      sync.Mutex
	started bool
	lastErr string
	closeBy time.Time // set by Close: the last round ends by then
	stop    chan struct{}
	done    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
}

// NewExporter is the exporter of the log at path to client.
func NewExporter(path string, client *Client, o Options) *Exporter {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Exporter{path: path, client: client, opts: o, stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Start runs the background sender: it never holds up an append (it reads the log as any
// reader does) and backs off while the collector does not answer.
func (e *Exporter) Start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return
	}
	e.started = true
	go e.loop()
}

func (e *Exporter) loop() {
	defer close(e.done)
	backoff := time.Duration(0)
	t := time.NewTimer(e.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			// Close: one last round, bounded by the context Close cancels at its deadline.
			_, _ = e.flush(e.ctx, true)
			return
		case <-t.C:
		}
		_, err := e.flush(e.ctx, false)
		next := e.opts.Interval
		var re *RefusedError
		switch {
		case err == nil || errors.Is(err, audit.ErrOutboxBusy):
			backoff = 0
		default:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			next = backoff/2 + rand.N(backoff/2+1)
			if errors.As(err, &re) && re.RetryAfter > next {
				next = re.RetryAfter
			}
		}
		t.Reset(next)
	}
}

// Close stops the background sender after one last round that sends what is left (this
// process's records and any backlog), waiting at most wait for it; what was not
// acknowledged by then stays for the next process.
func (e *Exporter) Close(wait time.Duration) {
	e.mu.Lock()
	started := e.started
	e.started = false
	e.mu.Unlock()
	if !started {
		e.cancel()
		return
	}
	e.mu.Lock()
	e.closeBy = time.Now().Add(wait)
	e.mu.Unlock()
	timer := time.AfterFunc(wait, e.cancel)
	defer timer.Stop()
	close(e.stop)
	<-e.done
	e.cancel()
}

// Flush sends everything after the cursor, waiting for another process's send to end if
// need be, until ctx is done. It returns how many records were acknowledged.
func (e *Exporter) Flush(ctx context.Context) (int, error) { return e.flush(ctx, true) }

func (e *Exporter) flush(ctx context.Context, waitLock bool) (int, error) {
	wait := time.Duration(0)
	if waitLock {
		// Another process sending the same log is waited for, within the round's bound.
		wait = time.Second
		e.mu.Lock()
		by := e.closeBy
		e.mu.Unlock()
		if d, ok := ctx.Deadline(); ok {
			by = d
		}
		if !by.IsZero() {
			wait = max(time.Until(by), 0)
		}
	}
	ob, err := audit.AcquireOutbox(e.path, wait)
	if err != nil {
		if !errors.Is(err, audit.ErrOutboxBusy) {
			e.warn(err)
		}
		return 0, err
	}
	defer ob.Release()
	n, err := Drain(ctx, e.path, ob, e.client, e.opts.Append)
	e.warn(err)
	return n, err
}

func (e *Exporter) warn(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			e.lastErr = ""
		}
		return
	}
	if msg := err.Error(); msg != e.lastErr {
		e.lastErr = msg
		if e.opts.Warn != nil {
			e.opts.Warn(fmt.Sprintf("audit export: %s (records stay in the log and are sent later)", msg))
		}
	}
}

// Drain sends, batch by batch, every record after ob's cursor and moves the cursor past each
// batch the collector acknowledged. Records the log pruned before they were sent are named
// in an export_gap record (through appendRec, when given), which is then sent like any other.
func Drain(ctx context.Context, path string, ob *audit.Outbox, c *Client, appendRec func(*audit.Record) error) (int, error) {
	cur, err := ob.Cursor()
	if err != nil {
		return 0, err
	}
	sent := 0
	for {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		batch, size := make([]audit.Entry, 0, 64), 0
		gap, err := audit.ReadAfter(path, cur, func(en audit.Entry) error {
			if len(batch) >= MaxBatchRecords || (len(batch) > 0 && size+len(en.Line) > MaxBatchBytes) {
				return audit.ErrStopRead
			}
			en.Line = append([]byte(nil), en.Line...)
			batch = append(batch, en)
			size += len(en.Line)
			return nil
		})
		if errors.Is(err, audit.ErrNoLog) {
			return sent, nil
		}
		if errors.Is(err, audit.ErrCursorAhead) {
			// A new log: send it whole (at least once beats never).
			cur = audit.Position{}
			if err := ob.Ack(cur); err != nil {
				return sent, err
			}
			continue
		}
		if err != nil {
			return sent, err
		}
		if gap != nil && appendRec != nil {
			if err := appendRec(audit.GapRecord(*gap, c.URL())); err != nil {
				return sent, fmt.Errorf("audit export: recording lost records %d..%d: %w", gap.First, gap.Last, err)
			}
		}
		if gap != nil {
			// Recorded once: the cursor moves past what is gone.
			cur = audit.Position{Seq: gap.Last}
			if err := ob.Ack(cur); err != nil {
				return sent, err
			}
		}
		if len(batch) == 0 {
			return sent, nil
		}
		if _, err := c.Send(ctx, batch); err != nil {
			return sent, err
		}
		cur = batch[len(batch)-1].Pos
		if err := ob.Ack(cur); err != nil {
			return sent, err
		}
		sent += len(batch)
	}
}

// Range sends the records f matches by hand (fledge audit export), in batches, without
// reading or moving the cursor; it returns how many were acknowledged.
func Range(ctx context.Context, path string, f audit.Filter, c *Client) (int, error) {
	var batch []audit.Entry
	size, sent := 0, 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := c.Send(ctx, batch); err != nil {
			return err
		}
		sent += len(batch)
		batch, size = batch[:0], 0
		return nil
	}
	_, err := audit.ReadAfter(path, audit.Position{}, func(en audit.Entry) error {
		if !f.Match(en.Record) {
			return nil
		}
		if len(batch) >= MaxBatchRecords || size+len(en.Line) > MaxBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		en.Line = append([]byte(nil), en.Line...)
		batch = append(batch, en)
		size += len(en.Line)
		return nil
	})
	if err != nil {
		return sent, err
	}
	return sent, flush()
}

// State is the export's progress, for doctor.
type State struct {
	Acked     audit.Position // the cursor (Seq 0: nothing acknowledged yet)
	LastSeq   uint64         // the newest record in the log
	Backlog   int            // records after the cursor
	BacklogOK bool           // false when the log could not be read
}

// ReadState reads the cursor and counts what is after it.
func ReadState(path string) (State, error) {
	var s State
	cur, err := audit.ReadCursor(path)
	if err != nil {
		return s, err
	}
	s.Acked, s.LastSeq = cur, cur.Seq
	count := func(en audit.Entry) error {
		s.Backlog++
		s.LastSeq = en.Record.Seq
		return nil
	}
	_, err = audit.ReadAfter(path, cur, count)
	if errors.Is(err, audit.ErrCursorAhead) {
		// The next sender starts the log again from its oldest record.
		_, err = audit.ReadAfter(path, audit.Position{}, count)
	}
	if err != nil && !errors.Is(err, audit.ErrNoLog) {
		return s, err
	}
	s.BacklogOK = true
	return s, nil
}
