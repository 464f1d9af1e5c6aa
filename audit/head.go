// SPDX-License-Identifier: MIT

package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"
)

// The head is where the chain stood after the last durable append: its seq, hash and time,
// kept in <log>.head, apart from the log. A hash chain proves what it holds but not that it
// is whole at the end: deleting the last records leaves a valid, shorter chain. The head
// remembers how far the log reached, so `audit verify` (and the next writer) can tell a log
// that is shorter than it was.
//
// The file holds two fixed-size slots; an update overwrites one of them with one pwrite, the
// slot of its seq's parity, so a torn write (a crash mid-pwrite) leaves the other slot, one
// durable append behind. Each slot carries a checksum of its fields: that finds a torn or
// corrupt slot, it is no seal against the user, who may rewrite the whole file as they may
// rewrite the log. What the user cannot rewrite is the witness (see Witness).
//
// The head only advances once the record it names is on disk (after its fsync), so a power
// loss can leave it behind the log, never ahead of it: a log shorter than its head lost
// records after they were durable, which a crash does not do.

// HeadSuffix names the head file: <log path> + HeadSuffix.
const HeadSuffix = ".head"

// Sidecars are the files fledge keeps beside a log at path: its lock, the truncation head,
// the shared fsync count, the export cursor and its lock. Each steers how the log is
// written or shipped, so nothing but fledge may write them (policy denies them with the log).
func Sidecars(path string) []string {
	return []string{path + ".lock", path + HeadSuffix, path + SyncSuffix, CursorPath(path), CursorPath(path) + ".lock"}
}

const (
	headSlotBytes = 512
	headVersion   = 1
)

// ErrBadHead says the head file exists but neither slot holds a valid head.
var ErrBadHead = errors.New("audit: the log's head file is unreadable")

// Head is a checkpoint of the chain: the last durable record's seq, hash and time.
type Head struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time"`
}

type headSlot struct {
	V    int       `json:"v"`
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time"`
	Sum  string    `json:"sum"`
}

func headSum(seq uint64, hash string, t time.Time) string {
	s := sha256.Sum256([]byte(strconv.FormatUint(seq, 10) + "|" + hash + "|" + t.UTC().Format(time.RFC3339Nano)))
	return hex.EncodeToString(s[:16])
}

func encodeHeadSlot(h Head) []byte {
	b, _ := json.Marshal(headSlot{V: headVersion, Seq: h.Seq, Hash: h.Hash, Time: h.Time.UTC(), Sum: headSum(h.Seq, h.Hash, h.Time)})
	out := make([]byte, headSlotBytes)
	for i := range out {
		out[i] = ' '
	}
	copy(out, b)
	out[headSlotBytes-1] = '\n'
	return out
}

func decodeHeadSlot(b []byte) (Head, bool) {
	var s headSlot
	if len(b) != headSlotBytes || json.Unmarshal(b, &s) != nil || s.V != headVersion || len(s.Hash) != len(ZeroHash) {
		return Head{}, false
	}
	if s.Sum != headSum(s.Seq, s.Hash, s.Time) {
		return Head{}, false
	}
	return Head{Seq: s.Seq, Hash: s.Hash, Time: s.Time}, true
}

// readHead returns the newest valid slot of f; nil when the file is empty (never written).
func readHead(f *os.File) (*Head, error) {
	buf := make([]byte, 2*headSlotBytes)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("audit: read head %s: %w", f.Name(), err)
	}
	if n == 0 {
		return nil, nil
	}
	var best *Head
	for i := 0; i < 2; i++ {
		if (i+1)*headSlotBytes > n {
			break
		}
		if h, ok := decodeHeadSlot(buf[i*headSlotBytes : (i+1)*headSlotBytes]); ok && (best == nil || h.Seq > best.Seq) {
			best = &h
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: %s: no valid slot in %d bytes", ErrBadHead, f.Name(), n)
	}
	return best, nil
}

// ReadHead reads the head of the log at path; nil, nil when there is none.
func ReadHead(path string) (*Head, error) {
	f, err := openReadOnly(path + HeadSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readHead(f)
}

// writeHead stores h in the slot of its seq's parity. both also overwrites the other slot:
// a rollback moves the head back, and the newer slot must not survive it.
func writeHead(f *os.File, h Head, both bool) error {
	b := encodeHeadSlot(h)
	off := int64(h.Seq%2) * headSlotBytes
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("audit: write head %s: %w", f.Name(), err)
	}
	if both {
		if _, err := f.WriteAt(b, headSlotBytes-off); err != nil {
			return fmt.Errorf("audit: write head %s: %w", f.Name(), err)
		}
	}
	return nil
}

// advanceHead moves the head to pos (a record now on disk, written at t) and hands the
// checkpoint to the witness. Called under the lock, right after pos was appended: pos is the
// newest record, so it is ahead of any head. A failed head write does not fail the append
// (the record is durable; the head only lags).
func (l *Log) advanceHead(pos chainPos, t time.Time) {
	if l.head == nil {
		return
	}
	h := Head{Seq: pos.seq, Hash: pos.hash, Time: t}
	if err := writeHead(l.head, h, false); err != nil {
		l.witnessFailed(err)
		return
	}
	l.checkpoint(h)
}

// advanceHeadLate is advanceHead for a record whose deferred fsync finished after other
// appends may have moved the head past it: the head only moves forward.
func (l *Log) advanceHeadLate(pos chainPos, t time.Time) {
	if l.head == nil {
		return
	}
	if cur, err := readHead(l.head); err == nil && cur != nil && cur.Seq >= pos.seq {
		return
	}
	l.advanceHead(pos, t)
}

// resetHead puts the head back at pos after a rollback took the record it named back.
func (l *Log) resetHead(pos chainPos) {
	if l.head == nil {
		return
	}
	cur, err := readHead(l.head)
	if err != nil || cur == nil || cur.Seq <= pos.seq {
		return
	}
	_ = writeHead(l.head, Head{Seq: pos.seq, Hash: pos.hash, Time: time.Now().UTC()}, true)
}

// EventLogTruncated is written by the log itself when it finds the log shorter than its
// head (records deleted from the end, or the whole log deleted): it continues the chain from
// the head, so the gap stays in the log as a seq gap that `verify` reports, even if the head
// file is rewritten afterwards.
const EventLogTruncated = "log_truncated"

// Details of a log_truncated record.
const (
	DetailMissingFirstSeq = "missing_first_seq" // first seq the head names that the log lacks
	DetailMissingLastSeq  = "missing_last_seq"  // the head's seq
	DetailHeadHash        = "head_hash"         // the head's hash: this record's prev_hash
	DetailHeadTime        = "head_time"         // when that record was written
	DetailLogLastSeq      = "log_last_seq"      // where the log ended (0: no log at all)
	DetailLogLastHash     = "log_last_hash"
)

// checkTruncated compares where the log ends (pos) with the head. When the head is ahead,
// or names pos's seq with another hash, it writes a log_truncated record chained to the
// head and returns the new position; otherwise pos. Called under the lock, on a tail read
// from disk.
func (l *Log) checkTruncated(f *os.File, pos chainPos) (chainPos, error) {
	if l.head == nil {
		return pos, nil
	}
	h, err := readHead(l.head)
	if err != nil {
		// A corrupt head: the writer starts it afresh at the next durable append; verify
		// reports it as it finds it.
		return pos, nil
	}
	if h == nil || h.Seq < pos.seq || (h.Seq == pos.seq && h.Hash == pos.hash) {
		return pos, nil
	}
	msg := fmt.Sprintf("the log ends at seq %d but its head says seq %d was written (%s): records were deleted from the end", pos.seq, h.Seq, h.Time.Format(time.RFC3339))
	first := pos.seq + 1
	if h.Seq == pos.seq {
		first = h.Seq
		msg = fmt.Sprintf("record seq %d differs from the one the head names (%s): the end of the log was replaced", h.Seq, h.Time.Format(time.RFC3339))
	}
	rec := &Record{
		Event:    EventLogTruncated,
		Decision: Error,
		Reason:   ReasonTruncated,
		Details: map[string]any{
			DetailMissingFirstSeq: first, DetailMissingLastSeq: h.Seq, DetailHeadHash: h.Hash,
			DetailHeadTime: h.Time.UTC().Format(time.RFC3339Nano), DetailLogLastSeq: pos.seq, DetailLogLastHash: pos.hash,
			DetailMessage: msg,
		},
	}
	s, err := l.seal(rec, chainPos{h.Seq, h.Hash})
	if err != nil {
		return chainPos{}, err
	}
	if _, err := l.write(f, append(s.line, '\n'), l.opts.Fsync != FsyncNever, nil); err != nil {
		return chainPos{}, err
	}
	np := chainPos{s.seq, s.hash}
	l.advanceHead(np, s.time)
	return np, nil
}

// ReasonTruncated is the reason of a log_truncated record: none of fledge's decision
// reasons (package reason) fits a log that lost its end.
const ReasonTruncated = "truncated"
