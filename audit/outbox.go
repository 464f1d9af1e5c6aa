// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fledgehq/fledge/reason"
)

// The outbox: the log itself is what a shipper sends (audit/otlp). What has been
// acknowledged is a cursor stored beside the log (<log>.export, replaced atomically), and
// one sender at a time, across processes, holds <log>.export.lock. Nothing is queued
// anywhere else, so a crash loses nothing: the next sender starts again after the cursor,
// and what the log's own retention pruned before it was sent is recorded (export_gap).

// EventExportGap is written by a shipper that finds records it had not yet sent already
// gone from the log (pruned by Options.MaxTotalBytes): they can never be sent.
const EventExportGap = "export_gap"

// Details of an export_gap record.
const (
	DetailGapFirstSeq = "gap_first_seq" // the first record lost to the shipper
	DetailGapLastSeq  = "gap_last_seq"  // the last one
	DetailExportTo    = "export_to"     // where the shipper sends (an endpoint URL, no secrets)
)

// Position is where the log stood just after one record: its seq and hash, and where its
// line ended (the file's base name and inode when read, and the offset past its newline).
// A rotation renames the live file but keeps its inode, so the inode finds the place again.
type Position struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash,omitempty"`
	File string    `json:"file,omitempty"`
	Ino  uint64    `json:"ino,omitempty"`
	Off  int64     `json:"off,omitempty"`
	Time time.Time `json:"time,omitzero"` // when it was acknowledged (the cursor only)
}

// Entry is one record handed out by ReadAfter: the record, its line exactly as stored
// (valid only during the callback), and the position after it.
type Entry struct {
	Record *Record
	Line   []byte
	Pos    Position
}

// Gap says records after a position are no longer in the log: seqs First..Last.
type Gap struct{ First, Last uint64 }

// ErrCursorAhead: a position names a seq the log never reached (the log was deleted and
// begun again since); a sender starts again from the oldest record.
var ErrCursorAhead = errors.New("audit: the export cursor is ahead of the log")

// ErrStopRead is returned by a ReadAfter callback to stop the walk without an error.
var ErrStopRead = errors.New("audit: stop reading")

// ReadAfter calls fn for every record after pos (the zero Position: from the oldest kept),
// oldest first, across rotated files. The first record handed out is pos.Seq+1 unless the
// log no longer holds it: then the returned Gap names what is missing (pruned, or a cursor
// of another log). Torn lines are skipped; an unterminated last line is not a record yet.
// The position hint lets a sender resume without reading the log again from its start.
func ReadAfter(path string, pos Position, fn func(Entry) error) (*Gap, error) {
	snap, err := takeSnapshot(path)
	if err != nil {
		return nil, err
	}
	defer snap.close()
	snap.skipVanished = true
	fromFile, fromOff := 0, int64(0)
	hinted := false
	if pos.Seq > 0 {
		if i, ok := snap.findIno(pos); ok {
			fromFile, fromOff, hinted = i, pos.Off, true
		} else {
			fromFile = snap.fileFor(pos.Seq + 1)
		}
	}
	gap, maxSeen, err := snap.readAfter(fromFile, fromOff, pos.Seq, fn)
	if err == nil && pos.Seq > 0 && maxSeen > 0 && maxSeen < pos.Seq {
		// Every record read is older than the position: this log is not the one the
		// position was taken in (deleted and begun again).
		return nil, fmt.Errorf("%w: it names seq %d, the log ends at seq %d", ErrCursorAhead, pos.Seq, maxSeen)
	}
	if gap != nil && hinted {
		// The hint named a file that no longer holds what followed (an inode reused after a
		// prune): look the place up again by seq.
		gap, _, err = snap.readAfter(snap.fileFor(pos.Seq+1), 0, pos.Seq, fn)
	}
	return gap, err
}

// findIno returns the snapshot file with pos's inode, when it is long enough to hold pos.
func (s *snapshot) findIno(pos Position) (int, bool) {
	if pos.Ino == 0 {
		return 0, false
	}
	for i, f := range s.files {
		var fi os.FileInfo
		var err error
		if f.f != nil {
			fi, err = f.f.Stat()
		} else {
			fi, err = os.Lstat(f.path)
		}
		if err != nil || fileIno(fi) != pos.Ino {
			continue
		}
		size := f.size
		if size < 0 {
			size = fi.Size()
		}
		if size >= pos.Off {
			return i, true
		}
	}
	return 0, false
}

// fileFor is the newest file whose first record is at or before seq (0 when none is).
func (s *snapshot) fileFor(seq uint64) int {
	idx := 0
	for i, f := range s.files {
		if first := firstSeq(f.path); first != 0 && first <= seq {
			idx = i
		}
	}
	return idx
}

func (s *snapshot) readAfter(fromFile int, fromOff int64, after uint64, fn func(Entry) error) (gap *Gap, maxSeen uint64, err error) {
	checked := false
	var st struct {
		idx int
		ino uint64
	}
	st.idx = -1
	err = s.walk(fromFile, fromOff, 1, func(ln *line) error {
		if !ln.terminated || !json.Valid(ln.data) {
			return nil
		}
		r, err := decodeRecord(ln.data)
		if err != nil {
			return &LineError{ln.file, ln.no, fmt.Errorf("%w: %v", ErrBadRecord, err)}
		}
		maxSeen = max(maxSeen, r.Seq)
		if r.Seq <= after {
			return nil
		}
		if !checked {
			checked = true
			if after > 0 && r.Seq > after+1 {
				gap = &Gap{First: after + 1, Last: r.Seq - 1}
				if fromOff > 0 {
					return ErrStopRead // the caller looks again without the hint
				}
			}
		}
		if st.idx != ln.fileIdx {
			st.idx, st.ino = ln.fileIdx, s.inoOf(ln.fileIdx)
		}
		return fn(Entry{Record: r, Line: ln.data, Pos: Position{
			Seq: r.Seq, Hash: r.Hash, File: filepath.Base(ln.file), Ino: st.ino,
			Off: ln.off + int64(len(ln.data)) + 1,
		}})
	})
	if errors.Is(err, ErrStopRead) {
		err = nil
	}
	return gap, maxSeen, err
}

func (s *snapshot) inoOf(i int) uint64 {
	f := s.files[i]
	var fi os.FileInfo
	var err error
	if f.f != nil {
		fi, err = f.f.Stat()
	} else {
		fi, err = os.Lstat(f.path)
	}
	if err != nil {
		return 0
	}
	return fileIno(fi)
}

// maxCursorBytes bounds what is read of a cursor file (one small JSON object).
const maxCursorBytes = 4 << 10

// CursorPath is where the export cursor of the log at path is kept.
func CursorPath(path string) string { return path + ".export" }

// ReadCursor returns the stored export cursor (the zero Position when there is none).
func ReadCursor(path string) (Position, error) {
	f, err := openReadOnly(CursorPath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return Position{}, nil
	}
	if err != nil {
		return Position{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCursorBytes))
	if err != nil {
		return Position{}, err
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return Position{}, fmt.Errorf("audit: export cursor %s: %w", CursorPath(path), err)
	}
	return p, nil
}

// Outbox is one sender's hold on a log's export cursor: only the process holding it moves
// the cursor. Release it when done.
type Outbox struct {
	path string
	lock *os.File
}

// ErrOutboxBusy: another process is sending this log now.
var ErrOutboxBusy = errors.New("audit: another fledge process is exporting this log")

// AcquireOutbox takes <log>.export.lock, waiting at most wait (0: not at all; then
// ErrOutboxBusy when another process holds it).
func AcquireOutbox(path string, wait time.Duration) (*Outbox, error) {
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	lf, err := openPrivate(CursorPath(path)+".lock", os.O_RDWR)
	if err != nil {
		return nil, err
	}
	if err := flockWait(lf, lockEx, wait); err != nil {
		lf.Close()
		if errors.Is(err, ErrLockTimeout) {
			return nil, ErrOutboxBusy
		}
		return nil, err
	}
	return &Outbox{path: path, lock: lf}, nil
}

// Cursor is the stored cursor.
func (o *Outbox) Cursor() (Position, error) { return ReadCursor(o.path) }

// Ack stores p as the cursor: written to a temporary file, synced, renamed over the old one.
// A crash leaves the old cursor or the new one, never half of one; an old one only means
// records are sent again.
func (o *Outbox) Ack(p Position) error {
	if p.Time.IsZero() {
		p.Time = time.Now().UTC()
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	dst := CursorPath(o.path)
	tmp := dst + ".tmp"
	f, err := openPrivate(tmp, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// Release lets another process send.
func (o *Outbox) Release() {
	if o.lock != nil {
		_ = funlock(o.lock)
		o.lock.Close()
		o.lock = nil
	}
}

// GapRecord is the export_gap record for g (to append to the log, then send).
func GapRecord(g Gap, to string) *Record {
	return &Record{
		Event:    EventExportGap,
		Decision: Error,
		Reason:   string(reason.LimitExceeded),
		Details: map[string]any{
			DetailGapFirstSeq: g.First,
			DetailGapLastSeq:  g.Last,
			DetailExportTo:    to,
		},
	}
}
