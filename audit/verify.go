// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// maxRecoveredListed bounds VerifyReport.Recovered; RecoveredCount has the full count.
const maxRecoveredListed = 100

// Break is the first place a log stops verifying.
type Break struct {
	File string
	Line int
	// Seq is the broken record's seq when it could be read, else the seq expected there.
	Seq    uint64
	Kind   BreakKind
	Detail string
}

func (b *Break) String() string {
	return fmt.Sprintf("%s:%d: seq %d: %s: %s", b.File, b.Line, b.Seq, b.Kind, b.Detail)
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Records int      // records verified, in order, before the first break (all of them when OK)
	Files   []string // files walked, oldest first
	OK      bool
	Break   *Break // the first break; nil when OK
	// LastSeq/LastHash are the last verified record: deleting records from the end of a
	// hash chain is only detectable against such an anchor kept elsewhere.
	LastSeq  uint64
	LastHash string
	// Recovered lists crashes the writer recovered from (kind torn_tail, at most
	// maxRecoveredListed); they do not make the log fail, the log_recovered records say so.
	Recovered      []Break
	RecoveredCount int
	// PrunedThrough is set when the kept log starts after seq 1 because fledge deleted its
	// oldest files (Options.MaxTotalBytes): records 1..PrunedThrough are gone, as the
	// log_pruned record PrunedBy (a seq) says, naming the hash the first kept record chains to.
	PrunedThrough uint64
	PrunedBy      uint64
	// Head is the log's head (nil: none yet, as before the first durable append of a fledge
	// that keeps one); Witness the checkpoint VerifyOptions gave. The log must reach both.
	Head    *Head
	Witness *Head
}

// VerifyOptions are what Verify checks the log against besides itself.
type VerifyOptions struct {
	// Witness is the newest checkpoint a witness kept (ParseCheckpoints); nil: none.
	Witness *Head
}

// Verify walks the whole chain, rotated files first, and reports the first break: an edited
// record (its hash does not match its content), deleted records (a seq gap whose prev_hash
// does not chain), reordered records (seq going backwards, or a missing seq found later),
// a record whose prev_hash does not match (chain_mismatch: the previous record was edited
// and re-hashed), a line that is not a record (bad_json), or a torn tail: a partial last line
// left by a crash, which the next append recovers. Any break means OK=false. The error is
// for I/O problems only (and ErrNoLog when there is no log at all).
//
// A log whose oldest files fledge pruned starts after seq 1: that is accepted only when a
// log_pruned record later in the chain names the first kept record's prev_hash as the last
// hash it deleted; any other missing start (a file deleted by hand) is a deleted break.
//
// The end of the log is checked against its head (<log>.head) and the witness's checkpoint:
// a log that ends before either, or whose record at their seq has another hash, is a
// truncated break naming the missing seqs.
func Verify(path string) (*VerifyReport, error) {
	return VerifyWith(path, VerifyOptions{})
}

// VerifyWith is Verify checking the end of the log against o's witness checkpoint too.
func VerifyWith(path string, o VerifyOptions) (*VerifyReport, error) {
	// A writer may prune the oldest files while we read them: start again on what is kept.
	for attempt := 0; ; attempt++ {
		rep, err := verifyOnce(path, o)
		if errors.Is(err, errVanished) && attempt < 3 {
			continue
		}
		return rep, err
	}
}

func verifyOnce(path string, o VerifyOptions) (*VerifyReport, error) {
	snap, err := takeSnapshot(path)
	var want []anchorCheck
	if snap != nil && snap.head != nil {
		want = append(want, anchorCheck{Head: *snap.head, what: "its head (" + filepath.Base(path) + HeadSuffix + ")"})
	}
	if w := o.Witness; w != nil {
		want = append(want, anchorCheck{Head: *w, what: "the witness's checkpoint"})
	}
	if errors.Is(err, ErrNoLog) && len(want) > 0 {
		// No log file at all, but a head or witness says there were records.
		rep := &VerifyReport{LastHash: ZeroHash, Head: snap.head, Witness: o.Witness}
		v := &verifier{rep: rep, want: want}
		v.checkEnd()
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	defer snap.close()
	v := &verifier{snap: snap, want: want, rep: &VerifyReport{Files: snap.names(), LastHash: ZeroHash, Head: snap.head, Witness: o.Witness}}
	if snap.headErr != nil {
		v.brk(path+HeadSuffix, 0, 0, BreakBadHead, snap.headErr.Error()+": the head was overwritten (only a writer's crash mid-update is expected, and it spoils one slot of two)")
		v.rep.OK = false
		return v.rep, nil
	}
	err = snap.walk(0, 0, 1, v.line)
	var le *LineError
	switch {
	case errors.Is(err, errStop):
	case errors.As(err, &le) && errors.Is(err, ErrLineTooLong):
		v.brk(le.File, le.Line, v.rep.LastSeq+1, BreakBadJSON, le.Err.Error())
	case err != nil:
		return nil, err
	case v.g != nil:
		// Torn bytes run to the end of the log: a crash, not yet recovered by a writer.
		v.brk(v.g.file, v.g.line, v.rep.LastSeq+1, BreakTornTail,
			fmt.Sprintf("%d bytes of partial record(s) at the end of the log: a write was cut short (crash?); the next append recovers them", v.g.n))
	}
	if a := v.anchor; a != nil && !a.confirmed && v.rep.Break == nil {
		// The start of the log is missing and fledge did not say it pruned it.
		v.rep.Records, v.rep.LastSeq, v.rep.LastHash = 0, 0, ZeroHash
		detail := fmt.Sprintf("the log starts at seq %d: records seq 1..%d are missing and no log_pruned record accounts for them", a.seq+1, a.seq)
		if a.seq == 1 {
			detail = "the log starts at seq 2: record seq 1 is missing and no log_pruned record accounts for it"
		}
		v.brk(a.file, a.line, a.seq+1, BreakDeleted, detail)
	}
	switch b := v.rep.Break; {
	case b == nil:
		v.checkEnd()
	case b.Kind == BreakTornTail:
		// A partial last line is a crash only when it comes after every record the head
		// and witness name: cutting a durable record in two is truncation.
		v.rep.Break = nil
		v.checkEnd()
		if v.rep.Break == nil {
			v.rep.Break = b
		} else {
			v.rep.Break.Detail += fmt.Sprintf("; a partial line follows at %s line %d", b.File, b.Line)
		}
	}
	v.rep.OK = v.rep.Break == nil
	return v.rep, nil
}

// anchorCheck is a checkpoint the log must reach: the head or the witness's.
type anchorCheck struct {
	Head
	what string
	seen bool   // the record at Seq was walked
	got  string // ... and had this hash
}

// checkEnd reports a log that ends before a checkpoint, or whose record at the checkpoint's
// seq is another record.
func (v *verifier) checkEnd() {
	last := v.rep.LastSeq
	file, line := "", 0
	if v.snap != nil && len(v.snap.files) > 0 {
		file = v.snap.files[len(v.snap.files)-1].path
		line = v.lines
	}
	for _, a := range v.want {
		when := a.Time.UTC().Format(time.RFC3339)
		switch {
		case a.Seq > last:
			missing := fmt.Sprintf("records seq %d..%d are missing", last+1, a.Seq)
			if a.Seq == last+1 {
				missing = fmt.Sprintf("record seq %d is missing", a.Seq)
			}
			v.brk(file, line, last+1, BreakTruncated, fmt.Sprintf("the log ends at seq %d but %s says seq %d was written (%s): %s", last, a.what, a.Seq, when, missing))
			return
		case a.seen && a.got != a.Hash:
			v.brk(file, line, a.Seq, BreakTruncated, fmt.Sprintf("record seq %d has hash %.12s… but %s names hash %.12s… (%s): the end of the log was replaced", a.Seq, a.got, a.what, a.Hash, when))
			return
		}
	}
	if v.snap == nil {
		v.brk("", 0, 1, BreakTruncated, "no log at all")
	}
}

// pruneAnchor is where a log that starts after seq 1 says the chain stood before it.
type pruneAnchor struct {
	seq       uint64
	hash      string
	file      string
	line      int
	confirmed bool
}

// confirms reports whether r is a log_pruned record naming exactly the anchor.
func (a *pruneAnchor) confirms(r *Record) bool {
	if r.Event != EventLogPruned || r.Details == nil {
		return false
	}
	match := func(seqV, hashV any) bool {
		seq, ok := detailInt(seqV)
		h, _ := hashV.(string)
		return ok && seq >= 0 && uint64(seq) == a.seq && h == a.hash
	}
	if match(r.Details[DetailPrunedLastSeq], r.Details[DetailPrunedLastHash]) {
		return true
	}
	// A crash part-way through the deletions (oldest first) leaves the start after one of
	// the files the record names.
	each, _ := r.Details[DetailPruned].([]any)
	for _, e := range each {
		if m, ok := e.(map[string]any); ok && match(m["last_seq"], m["last_hash"]) {
			return true
		}
	}
	return false
}

var errStop = errors.New("stop")

type verifier struct {
	want   []anchorCheck // checkpoints the log must reach
	lines  int           // lines walked in the last file
	snap   *snapshot
	rep    *VerifyReport
	g      *region      // pending torn lines
	anchor *pruneAnchor // the log starts after seq 1
}

func (v *verifier) brk(file string, line int, seq uint64, kind BreakKind, detail string) error {
	v.rep.Break = &Break{File: file, Line: line, Seq: seq, Kind: kind, Detail: detail}
	return errStop
}

func (v *verifier) line(ln *line) error {
	v.lines = ln.no
	next := v.rep.LastSeq + 1
	if v.g != nil && v.g.fileIdx != ln.fileIdx {
		// Writers never rotate a file with a torn tail, so this is not a crash.
		return v.brk(v.g.file, v.g.line, next, BreakBadJSON, "unreadable bytes at the end of a rotated file")
	}
	if !ln.terminated {
		if v.g != nil {
			v.g.add(ln)
			return nil // reported at the end of the walk
		}
		detail := fmt.Sprintf("partial final line (%d bytes) without newline: a write was cut short (crash?); the next append recovers it", len(ln.data))
		if r, lerr := parseLine(ln.data); lerr == nil {
			next = r.Seq
			detail = "complete record without its final newline: a write was cut short (crash?); the next append terminates it"
		}
		if ln.fileIdx != len(v.snap.files)-1 {
			return v.brk(ln.file, ln.no, next, BreakBadJSON, "a rotated file ends without a newline")
		}
		return v.brk(ln.file, ln.no, next, BreakTornTail, detail)
	}
	if !json.Valid(ln.data) {
		if v.g == nil {
			v.g = newRegion(ln)
		}
		if v.g.add(ln) > maxRegionBytes {
			return v.brk(v.g.file, v.g.line, next, BreakBadJSON, fmt.Sprintf("more than %d bytes of lines that are not JSON", maxRegionBytes))
		}
		return nil
	}
	r, lerr := parseLine(ln.data)
	if v.g != nil {
		if lerr != nil || !v.g.matches(r) {
			return v.brk(v.g.file, v.g.line, next, BreakBadJSON, "line is not JSON, and no log_recovered record accounts for it")
		}
		if len(v.rep.Recovered) < maxRecoveredListed {
			v.rep.Recovered = append(v.rep.Recovered, Break{File: v.g.file, Line: v.g.line, Seq: r.Seq, Kind: BreakTornTail,
				Detail: fmt.Sprintf("%d torn bytes at offset %d, recovered by log_recovered seq %d", v.g.n, v.g.start, r.Seq)})
		}
		v.rep.RecoveredCount++
		v.g = nil
	}
	if lerr != nil {
		return v.brk(ln.file, ln.no, next, lerr.kind, lerr.detail)
	}
	prev := v.rep.LastHash
	if v.rep.Records == 0 && v.anchor == nil && r.Seq > 1 {
		// The first record is not seq 1. Records moved later are reordered, as ever;
		// otherwise the start is missing, which a log_pruned record later on must account for.
		if where, ok := v.findLater(ln, r.Seq-1, r.PrevHash); ok {
			return v.brk(ln.file, ln.no, r.Seq, BreakReordered, fmt.Sprintf("expected seq %d, found seq %d; seq %d appears later at %s", next, r.Seq, r.Seq-1, where))
		}
		v.anchor = &pruneAnchor{seq: r.Seq - 1, hash: r.PrevHash, file: ln.file, line: ln.no}
		v.rep.LastSeq, v.rep.LastHash = r.Seq-1, r.PrevHash
		next, prev = r.Seq, r.PrevHash
	}
	switch {
	case r.Seq == next && r.PrevHash == prev:
		for i := range v.want {
			if v.want[i].Seq == r.Seq {
				v.want[i].seen, v.want[i].got = true, r.Hash
			}
		}
		v.rep.Records++
		v.rep.LastSeq, v.rep.LastHash = r.Seq, r.Hash
		if a := v.anchor; a != nil && !a.confirmed && a.confirms(r) {
			a.confirmed = true
			v.rep.PrunedThrough, v.rep.PrunedBy = a.seq, r.Seq
		}
		return nil
	case r.Seq == next && r.Event == EventLogTruncated:
		return v.brk(ln.file, ln.no, r.Seq, BreakTruncated, fmt.Sprintf(
			"record seq %d is not the one the head named (hash %.12s…): the end of the log was replaced, found by the writer of log_truncated seq %d (%s)",
			next-1, r.PrevHash, r.Seq, r.Time.UTC().Format(time.RFC3339)))
	case r.Seq == next:
		return v.brk(ln.file, ln.no, r.Seq, BreakChainMismatch, fmt.Sprintf(
			"prev_hash %.12s… does not match hash %.12s… of seq %d: that record was edited and re-hashed, or this one replaced",
			r.PrevHash, prev, next-1))
	case r.Seq < next:
		return v.brk(ln.file, ln.no, r.Seq, BreakReordered, fmt.Sprintf("seq %d comes after seq %d: records moved or duplicated", r.Seq, next-1))
	case r.PrevHash == prev:
		return v.brk(ln.file, ln.no, r.Seq, BreakChainMismatch, fmt.Sprintf("seq jumps from %d to %d though prev_hash chains: seq was rewritten", next-1, r.Seq))
	}
	// A gap: the missing record is either later in the log (moved) or gone.
	if where, ok := v.findLater(ln, next, r.PrevHash); ok {
		return v.brk(ln.file, ln.no, r.Seq, BreakReordered, fmt.Sprintf("expected seq %d, found seq %d; seq %d appears later at %s", next, r.Seq, next, where))
	}
	detail := fmt.Sprintf("records seq %d..%d are missing", next, r.Seq-1)
	if next == r.Seq-1 {
		detail = fmt.Sprintf("record seq %d is missing", next)
	}
	if r.Event == EventLogTruncated {
		// A writer found the log shorter than its head and went on from the head.
		return v.brk(ln.file, ln.no, r.Seq, BreakTruncated, detail+fmt.Sprintf(": deleted from the end of the log, found by the writer of log_truncated seq %d (%s)", r.Seq, r.Time.UTC().Format(time.RFC3339)))
	}
	return v.brk(ln.file, ln.no, r.Seq, BreakDeleted, detail)
}

// findLater scans the rest of the log for the record with seq want, or the one whose hash
// is the prev_hash the current record points at.
func (v *verifier) findLater(ln *line, want uint64, prevHash string) (string, bool) {
	var found string
	err := v.snap.walk(ln.fileIdx, ln.off+int64(len(ln.data))+1, ln.no+1, func(l2 *line) error {
		var probe struct {
			Seq  uint64 `json:"seq"`
			Hash string `json:"hash"`
		}
		if json.Unmarshal(l2.data, &probe) != nil {
			return nil
		}
		if probe.Seq == want || probe.Hash == prevHash {
			found = fmt.Sprintf("%s:%d", l2.file, l2.no)
			return errStop
		}
		return nil
	})
	return found, errors.Is(err, errStop)
}
