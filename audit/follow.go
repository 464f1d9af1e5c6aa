// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DefaultFollowInterval is how often Follow looks for new records: a record another process
// writes is shown within about this long.
const DefaultFollowInterval = 200 * time.Millisecond

// FollowOptions tune Follow.
type FollowOptions struct {
	// Interval between looks at the live file; 0 = DefaultFollowInterval.
	Interval time.Duration
}

// Follow calls fn for every record f matches, oldest first, as Query does, and then for each
// new record as writers append it (from this or any other process), across rotations, until
// ctx is done (nil then) or fn fails. A log that does not exist yet is waited for. Lines that
// are not records (torn bytes a log_recovered record accounts for) are skipped; a line is
// only read once its newline is written, and lines are bounded by MaxLineBytes.
func Follow(ctx context.Context, path string, f Filter, o FollowOptions, fn func(*Record) error) error {
	if o.Interval <= 0 {
		o.Interval = DefaultFollowInterval
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	fw := &follower{path: abs, filter: f, fn: fn}
	defer fw.close()
	if err := fw.start(); err != nil {
		return err
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		if err := fw.poll(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type follower struct {
	path    string
	filter  Filter
	fn      func(*Record) error
	f       *os.File // the live file being followed; nil until it exists
	off     int64    // bytes of f consumed (through the last newline)
	lastSeq uint64   // the newest record handed out (or skipped by the filter)
	partial []byte   // bytes after the last newline, waiting for theirs
}

// start reads what the log holds now (as Read does) and keeps the live file it read open.
func (w *follower) start() error {
	snap, err := takeSnapshot(w.path)
	if errors.Is(err, ErrNoLog) {
		return nil // a fresh install: wait for the first record
	}
	if err != nil {
		return err
	}
	snap.skipVanished = true
	last := len(snap.files) - 1
	liveIdx := -1
	if snap.files[last].f != nil {
		liveIdx = last
	}
	err = snap.walk(0, 0, 1, func(ln *line) error {
		if ln.fileIdx == liveIdx && ln.terminated {
			w.off = ln.off + int64(len(ln.data)) + 1
		}
		if !ln.terminated {
			return nil
		}
		return w.handle(ln.data)
	})
	if liveIdx >= 0 {
		// Keep it: later records are read from this very file until it is rotated.
		w.f = snap.files[liveIdx].f
		snap.files[liveIdx].f = nil
	}
	snap.close()
	return err
}

func (w *follower) close() {
	if w.f != nil {
		w.f.Close()
	}
}

// handle decodes one complete line and hands it to fn if it is new and matches.
func (w *follower) handle(data []byte) error {
	if !json.Valid(data) {
		return nil // torn bytes; the log_recovered record after them says so
	}
	r, err := decodeRecord(data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if r.Seq <= w.lastSeq && w.lastSeq != 0 {
		return nil // seen already (a file read again after a rotation race)
	}
	w.lastSeq = r.Seq
	if !w.filter.Match(r) {
		return nil
	}
	return w.fn(r)
}

// poll reads what was appended to the followed file, and moves to the new live file once
// the followed one was rotated (after reading the rest of it).
func (w *follower) poll() error {
	for {
		if w.f == nil {
			// Files rotated while there was no live file to follow (between a rotation and
			// the next append, or before the first look) hold records not read yet. The live
			// file is opened first: every file rotated before it existed is then listed.
			f, err := openReadOnly(w.path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if cerr := w.catchUp(); cerr != nil {
				if f != nil {
					f.Close()
				}
				return cerr
			}
			if f == nil {
				return nil // not created yet, or between a rotation and the next append
			}
			w.f, w.off, w.partial = f, 0, nil
		}
		// Look at the path before reading: a file rotated away by then gets no more
		// records, so what is read next is all of it.
		at, err := os.Lstat(w.path)
		if rerr := w.readNew(); rerr != nil {
			return rerr
		}
		cur, serr := w.f.Stat()
		if serr != nil {
			return serr
		}
		if err == nil && os.SameFile(cur, at) {
			if at.Size() < w.off {
				// The live file shrank: truncated by hand. Read it again from its start;
				// `audit verify` says what is missing.
				w.off, w.partial = 0, nil
				continue
			}
			return nil
		}
		// Rotated (or replaced): the rest of the old file was read above. Several rotations
		// may have happened since the last look: read the rotated files after it first.
		w.f.Close()
		w.f = nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
}

// readNew reads the followed file from off to its end and handles each complete line.
func (w *follower) readNew() error {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.ReadAt(buf, w.off+int64(len(w.partial)))
		if n > 0 {
			w.partial = append(w.partial, buf[:n]...)
			for {
				i := bytes.IndexByte(w.partial, '\n')
				if i < 0 {
					break
				}
				line := w.partial[:i]
				w.off += int64(i) + 1
				if len(line) > MaxLineBytes {
					return &LineError{w.path, 0, fmt.Errorf("%w: longer than %d bytes", ErrLineTooLong, MaxLineBytes)}
				}
				if herr := w.handle(line); herr != nil {
					return herr
				}
				w.partial = w.partial[i+1:]
			}
			if len(w.partial) > MaxLineBytes {
				return &LineError{w.path, 0, fmt.Errorf("%w: longer than %d bytes", ErrLineTooLong, MaxLineBytes)}
			}
			w.partial = append([]byte(nil), w.partial...)
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit: read %s: %w", w.path, err)
		}
	}
}

// catchUp reads the rotated files that start after the last record handed out: those that
// were rotated between two looks.
func (w *follower) catchUp() error {
	rs, err := listRotated(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no log directory yet
	}
	if err != nil {
		return err
	}
	for _, r := range rs {
		if firstSeq(r.path) <= w.lastSeq {
			continue
		}
		f, err := openReadOnly(r.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // pruned meanwhile
		}
		if err != nil {
			return err
		}
		w.f, w.off, w.partial = f, 0, nil
		err = w.readNew()
		f.Close()
		w.f, w.off, w.partial = nil, 0, nil
		if err != nil {
			return err
		}
	}
	return nil
}
