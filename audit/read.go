// SPDX-License-Identifier: MIT

package audit

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// LineError locates a problem at one line of one file.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Filter selects records for Query; zero fields match everything.
type Filter struct {
	Plugin   string
	Event    string
	Session  string
	Decision Decision
	Since    time.Time
}

// Match reports whether r passes the filter.
func (f Filter) Match(r *Record) bool {
	switch {
	case f.Plugin != "" && (r.Plugin == nil || r.Plugin.Name != f.Plugin):
		return false
	case f.Event != "" && r.Event != f.Event:
		return false
	case f.Session != "" && r.Session != f.Session:
		return false
	case f.Decision != "" && r.Decision != f.Decision:
		return false
	case !f.Since.IsZero() && r.Time.Before(f.Since):
		return false
	}
	return true
}

// Read calls fn for every record, oldest first: the rotated files in order, then the live
// file. It does not check hashes (Verify does). Torn bytes that a log_recovered record
// accounts for, and a torn last line, are skipped; any other unreadable line stops the walk
// with a *LineError (ErrBadRecord, or ErrLineTooLong past MaxLineBytes). An error from fn
// stops the walk and is returned as is. Memory stays bounded by MaxLineBytes.
func Read(path string, fn func(*Record) error) error {
	snap, err := takeSnapshot(path)
	if err != nil {
		return err
	}
	defer snap.close()
	snap.skipVanished = true
	var g *region
	err = snap.walk(0, 0, 1, func(ln *line) error {
		if !ln.terminated {
			return nil // a torn final line: not a record
		}
		if g != nil && g.fileIdx != ln.fileIdx {
			g = nil // torn bytes at the end of an older file: verify reports them
		}
		if !json.Valid(ln.data) {
			if g == nil {
				g = newRegion(ln)
			}
			if g.add(ln) > maxRegionBytes {
				return g.err("unreadable lines")
			}
			return nil
		}
		r, err := decodeRecord(ln.data)
		if err != nil {
			return &LineError{ln.file, ln.no, fmt.Errorf("%w: %v", ErrBadRecord, err)}
		}
		if g != nil {
			if !g.matches(r) {
				return g.err("not JSON, and not accounted for by a log_recovered record")
			}
			g = nil
		}
		return fn(r)
	})
	return err
}

// Query is Read restricted to the records f matches.
func Query(path string, f Filter, fn func(*Record) error) error {
	return Read(path, func(r *Record) error {
		if !f.Match(r) {
			return nil
		}
		return fn(r)
	})
}

// region is a run of torn (non-JSON) lines, to be matched against a log_recovered record.
type region struct {
	fileIdx int
	file    string
	line    int
	start   int64
	n       int
	h       hash.Hash
}

func newRegion(ln *line) *region {
	return &region{fileIdx: ln.fileIdx, file: ln.file, line: ln.no, start: ln.off, h: sha256.New()}
}

func (g *region) add(ln *line) int {
	g.h.Write(ln.data)
	g.n += len(ln.data)
	if ln.terminated {
		g.h.Write([]byte{'\n'})
		g.n++
	}
	return g.n
}

func (g *region) err(what string) error {
	return &LineError{g.file, g.line, fmt.Errorf("%w: %s", ErrBadRecord, what)}
}

// matches reports whether r is the log_recovered record naming exactly these bytes.
func (g *region) matches(r *Record) bool {
	if r.Event != EventLogRecovered || r.Details == nil {
		return false
	}
	off, ok1 := detailInt(r.Details[DetailSkippedOffset])
	n, ok2 := detailInt(r.Details[DetailSkippedBytes])
	sum, _ := r.Details[DetailSkippedSHA256].(string)
	return ok1 && ok2 && off == g.start && n == int64(g.n) && sum == hex.EncodeToString(g.h.Sum(nil))
}

func detailInt(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return n, err == nil
	case int64:
		return x, true
	case int:
		return int64(x), true
	case float64:
		return int64(x), float64(int64(x)) == x
	}
	return 0, false
}

// snapshot is a consistent view of the log's files: taken under a shared lock so no
// rotation or half-done append is seen, then read without holding it (rotated files never
// change; the live file is read up to its size at snapshot time).
type snapshot struct {
	files []fileRef
	// skipVanished: a rotated file deleted (pruned) after the snapshot is skipped, not an
	// error (Read); Verify starts again instead, on what is kept.
	skipVanished bool
	// head is the log's head read under the same lock (nil: none); headErr when unreadable.
	head    *Head
	headErr error
}

// errVanished says a rotated file of the snapshot was deleted before it was read.
var errVanished = errors.New("audit: a rotated file vanished while the log was read (pruned)")

type fileRef struct {
	path string
	f    *os.File // the live file, opened under the lock; nil for rotated files
	size int64
}

func takeSnapshot(path string) (*snapshot, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// A reader that may not open the lock file (another user's log) still reads; it may
	// then see a half-written last line, which is reported as torn.
	if lf, err := openReadOnly(abs + ".lock"); err == nil {
		defer lf.Close()
		if err := flockWait(lf, lockSh, DefaultLockTimeout); err != nil {
			return nil, err
		}
		defer funlock(lf)
	}
	s := &snapshot{}
	// Under the lock, the head never names a record the files do not hold yet.
	if s.head, err = ReadHead(abs); err != nil {
		if !errors.Is(err, ErrBadHead) {
			return nil, err
		}
		s.head, s.headErr = nil, err
	}
	rs, err := listRotated(abs)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, r := range rs {
		s.files = append(s.files, fileRef{path: r.path, size: -1})
	}
	f, err := openReadOnly(abs)
	switch {
	case err == nil:
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		s.files = append(s.files, fileRef{path: abs, f: f, size: fi.Size()})
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, err
	}
	if len(s.files) == 0 {
		// The snapshot comes back for its head: a log deleted whole is shorter than its head.
		return s, fmt.Errorf("%w at %s: %w", ErrNoLog, abs, fs.ErrNotExist)
	}
	return s, nil
}

func (s *snapshot) close() {
	for _, f := range s.files {
		if f.f != nil {
			f.f.Close()
		}
	}
}

func (s *snapshot) names() []string {
	out := make([]string, len(s.files))
	for i, f := range s.files {
		out[i] = f.path
	}
	return out
}

// line is one line handed out by walk; data is valid only during the callback.
type line struct {
	fileIdx    int
	file       string
	no         int
	off        int64
	data       []byte
	terminated bool
}

// walk calls fn for each line from file fromFile, offset fromOff (line number fromLine) to
// the end of the snapshot. Lines longer than MaxLineBytes stop it with ErrLineTooLong.
func (s *snapshot) walk(fromFile int, fromOff int64, fromLine int, fn func(*line) error) error {
	var acc []byte
	for i := fromFile; i < len(s.files); i++ {
		ref := s.files[i]
		f, size := ref.f, ref.size
		if f == nil {
			rf, err := openReadOnly(ref.path)
			if errors.Is(err, fs.ErrNotExist) {
				// Pruned by a writer since the snapshot: its records are gone by design.
				if s.skipVanished {
					continue
				}
				return fmt.Errorf("%w: %s", errVanished, ref.path)
			}
			if err != nil {
				return err
			}
			fi, err := rf.Stat()
			if err != nil {
				rf.Close()
				return err
			}
			f, size = rf, fi.Size()
		}
		off, no := int64(0), 1
		if i == fromFile {
			off, no = fromOff, fromLine
		}
		err := walkFile(f, i, ref.path, off, size, no, &acc, fn)
		if ref.f == nil {
			f.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func walkFile(f *os.File, idx int, name string, off, size int64, no int, acc *[]byte, fn func(*line) error) error {
	if off >= size {
		return nil
	}
	br := bufio.NewReaderSize(io.NewSectionReader(f, off, size-off), 64<<10)
	for {
		*acc = (*acc)[:0]
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			*acc = append(*acc, chunk...)
			if len(*acc) > MaxLineBytes+1 {
				return &LineError{name, no, fmt.Errorf("%w: longer than %d bytes", ErrLineTooLong, MaxLineBytes)}
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("audit: read %s: %w", name, err)
		}
		data := *acc
		if len(data) == 0 {
			return nil
		}
		ln := &line{fileIdx: idx, file: name, no: no, off: off}
		if data[len(data)-1] == '\n' {
			ln.data, ln.terminated = data[:len(data)-1], true
		} else {
			ln.data = data
		}
		if len(ln.data) > MaxLineBytes {
			return &LineError{name, no, fmt.Errorf("%w: longer than %d bytes", ErrLineTooLong, MaxLineBytes)}
		}
		if ferr := fn(ln); ferr != nil {
			return ferr
		}
		if err != nil { // io.EOF after a final unterminated line
			return nil
		}
		off += int64(len(data))
		no++
	}
}
