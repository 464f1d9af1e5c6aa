// SPDX-License-Identifier: MIT

package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fledgehq/fledge/reason"
)

// EventLogPruned is written by the log itself before it deletes its oldest rotated files to
// stay within Options.MaxTotalBytes. It names what goes and where the deleted part of the
// chain ended, so that `verify` proves the chain across what is kept: the first kept record's
// prev_hash must be the pruned_last_hash of a log_pruned record later in the chain.
const EventLogPruned = "log_pruned"

// Details of a log_pruned record.
const (
	DetailPrunedFiles    = "pruned_files"     // base names of the deleted files, oldest first
	DetailPrunedCount    = "pruned_count"     // how many files
	DetailPrunedBytes    = "pruned_bytes"     // their total size
	DetailPrunedFirstSeq = "pruned_first_seq" // seq of the first deleted record (0 if unreadable)
	DetailPrunedLastSeq  = "pruned_last_seq"  // seq of the last deleted record
	DetailPrunedLastHash = "pruned_last_hash" // its hash: the prev_hash of the first kept record
	DetailMaxTotalBytes  = "max_total_bytes"  // the bound that made fledge prune
	// DetailPruned lists each deleted file with where it left the chain ({file, last_seq,
	// last_hash}), so a crash part-way through the deletions (oldest first) still leaves a
	// start that a log_pruned record accounts for.
	DetailPruned = "pruned"
)

// maxPrunePerRecord bounds the files one log_pruned record names (below the list bound);
// more are pruned in several rounds, each with its record.
const maxPrunePerRecord = 32

// prune deletes the oldest rotated files while the log would keep more than MaxTotalBytes
// (rotated files plus room for a full live file), never the newest rotated file. It first
// writes a durable log_pruned record to the live file naming them, so deleting history is
// explicit and recorded; a crash between the record and the deletion leaves files the record
// calls pruned, and the next prune deletes them (with another record). Called under the lock.
func (l *Log) prune() error {
	if l.opts.MaxTotalBytes < 0 {
		return nil
	}
	for {
		more, err := l.pruneRound()
		if err != nil || !more {
			return err
		}
	}
}

// pruneRound deletes up to maxPrunePerRecord files and reports whether more must go.
func (l *Log) pruneRound() (more bool, err error) {
	rs, err := listRotated(l.path)
	if err != nil || len(rs) < 2 {
		return false, err
	}
	sizes := make([]int64, len(rs))
	var total int64
	for i, r := range rs {
		fi, err := os.Lstat(r.path)
		if err != nil {
			return false, err
		}
		sizes[i] = fi.Size()
		total += sizes[i]
	}
	room := l.opts.MaxTotalBytes - (l.opts.RotateBytes + int64(l.opts.MaxRecordBytes))
	k := 0
	var pruned int64
	for k < len(rs)-1 && total > room && k < maxPrunePerRecord {
		total -= sizes[k]
		pruned += sizes[k]
		k++
	}
	if k == 0 {
		return false, nil
	}
	more = k == maxPrunePerRecord && k < len(rs)-1 && total > room
	victims := rs[:k]
	names := make([]any, 0, k)
	each := make([]any, 0, k)
	var last chainPos
	for _, v := range victims {
		if last, err = fileTail(v.path); err != nil {
			return false, fmt.Errorf("audit: cannot prune %s: %w", v.path, err)
		}
		names = append(names, filepath.Base(v.path))
		each = append(each, map[string]any{"file": filepath.Base(v.path), "last_seq": last.seq, "last_hash": last.hash})
	}
	f, err := l.liveFile()
	if err != nil {
		return false, err
	}
	prev, err := l.prepare(f)
	if err != nil {
		return false, err
	}
	s, err := l.seal(&Record{
		Event: EventLogPruned, Decision: Allow, Reason: string(reason.OK),
		Details: map[string]any{
			DetailPrunedFiles: names, DetailPrunedCount: k, DetailPrunedBytes: pruned, DetailPruned: each,
			DetailPrunedFirstSeq: firstSeq(victims[0].path), DetailPrunedLastSeq: last.seq,
			DetailPrunedLastHash: last.hash, DetailMaxTotalBytes: l.opts.MaxTotalBytes,
			DetailMessage: "the oldest rotated files were deleted to keep the log within max_total_bytes",
		},
	}, prev)
	if err != nil {
		return false, err
	}
	if _, err := l.write(f, append(s.line, '\n'), l.opts.Fsync != FsyncNever, &prev); err != nil {
		return false, err
	}
	l.remember(f, chainPos{s.seq, s.hash})
	l.advanceHead(chainPos{s.seq, s.hash}, s.time)
	// Oldest first: a crash part-way leaves a start that the record's per-file list names.
	for _, v := range victims {
		if err := os.Remove(v.path); err != nil {
			return false, fmt.Errorf("audit: prune %s: %w", v.path, err)
		}
	}
	if l.opts.Fsync != FsyncNever {
		if err := syncDir(l.dir); err != nil {
			return false, err
		}
	}
	return more, nil
}

// firstSeq is the seq of a file's first record, 0 when it cannot be read.
func firstSeq(path string) uint64 {
	f, err := openReadOnly(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var acc []byte
	for len(acc) <= MaxLineBytes {
		chunk, err := br.ReadSlice('\n')
		acc = append(acc, chunk...)
		if err != bufio.ErrBufferFull {
			break
		}
	}
	var probe struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(acc, &probe) != nil {
		return 0
	}
	return probe.Seq
}
