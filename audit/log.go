// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui/clip"
)

// FsyncPolicy says when Append waits for the record to reach the disk.
type FsyncPolicy string

const (
	FsyncAlways  FsyncPolicy = "always"  // every record
	FsyncDurable FsyncPolicy = "durable" // only Append(r, true), e.g. the exec decision (default)
	FsyncNever   FsyncPolicy = "never"   // never, not even durable records (tmpfs CI, benchmarks)
)

const (
	// DefaultRotateBytes is the live file size that triggers rotation.
	DefaultRotateBytes int64 = 16 << 20
	// DefaultMaxRecordBytes bounds one stored line; larger details are truncated with a marker.
	DefaultMaxRecordBytes = 256 << 10
	// MinRecordBytes is the smallest MaxRecordBytes accepted: room for every fixed field at
	// its truncated size plus the truncation marker.
	MinRecordBytes = 16 << 10
	// MaxLineBytes bounds a line for every reader; a longer line is an error naming file and line.
	MaxLineBytes = 2 * DefaultMaxRecordBytes
	// maxRegionBytes bounds the torn bytes a writer will skip over when it recovers a crash.
	maxRegionBytes = MaxLineBytes
	// DefaultMaxTotalBytes bounds the bytes the log keeps on disk (see Options.MaxTotalBytes).
	DefaultMaxTotalBytes int64 = 256 << 20
	// DefaultLockTimeout bounds the wait for another fledge process holding the log lock.
	DefaultLockTimeout = 10 * time.Second
	// capString is the length caller-provided strings are cut to when a record is oversized.
	capString = 128
)

var (
	ErrSymlink        = errors.New("audit: log path is a symlink")
	ErrNotRegular     = errors.New("audit: log path is not a regular file")
	ErrInsecurePerms  = errors.New("audit: insecure ownership or permissions")
	ErrLockTimeout    = errors.New("audit: timed out waiting for the log lock")
	ErrCorruptTail    = errors.New("audit: the log ends with data that is not a torn write; run `fledge audit verify`")
	ErrClosed         = errors.New("audit: log is closed")
	ErrInvalidOptions = errors.New("audit: invalid options")
	ErrRecordTooLarge = errors.New("audit: record too large even after truncation")
	ErrLineTooLong    = errors.New("audit: line too long")
	ErrBadRecord      = errors.New("audit: unreadable record")
	ErrNoLog          = errors.New("audit: no audit log")
	ErrUnsupported    = errors.New("audit: not supported")
)

// Options tune a Log. The zero value is the default.
type Options struct {
	Fsync FsyncPolicy
	// RotateBytes: rotate once the live file reaches this size; 0 = DefaultRotateBytes, -1 = never.
	RotateBytes int64
	// MaxRecordBytes bounds one stored line (newline included); 0 = DefaultMaxRecordBytes.
	// Accepted range: MinRecordBytes..DefaultMaxRecordBytes, so every reader can read it back.
	MaxRecordBytes int
	// LockTimeout bounds the wait for the cross-process lock; 0 = DefaultLockTimeout.
	LockTimeout time.Duration
	// MaxFieldBytes bounds one string of a record; 0 = DefaultMaxFieldBytes. Accepted range:
	// MinFieldBytes..MaxRecordBytes/4.
	MaxFieldBytes int
	// MaxListItems bounds one list or object in details; 0 = DefaultMaxListItems (1..1024).
	MaxListItems int
	// MaxTotalBytes bounds the bytes kept on disk, rotated files and live file together: after
	// a rotation the oldest rotated files are deleted (with a log_pruned record first) until
	// the rest fits. 0 = DefaultMaxTotalBytes, -1 = keep everything. Needs rotation, and at
	// least 2*(RotateBytes+MaxRecordBytes) so the newest rotated file is always kept.
	MaxTotalBytes int64
	// Witness receives a checkpoint (the head) after each durable append, to keep where the
	// plugin's user cannot rewrite it (see witness.go); nil: none. The Log closes it.
	Witness Witness
	// WitnessError is told the first failure to update the head or reach the witness (the
	// append itself succeeded); nil: ignored.
	WitnessError func(error)
	// Redact holds the secret values this process handed out: every record is written with
	// them (and their encodings) replaced by [secret:NAME] (redact.go). nil: none.
	Redact *Redactor
}

func (o Options) withDefaults() (Options, error) {
	switch o.Fsync {
	case "":
		o.Fsync = FsyncDurable
	case FsyncAlways, FsyncDurable, FsyncNever:
	default:
		return o, fmt.Errorf("%w: fsync policy %q (want always, durable or never)", ErrInvalidOptions, o.Fsync)
	}
	switch {
	case o.RotateBytes == 0:
		o.RotateBytes = DefaultRotateBytes
	case o.RotateBytes < -1:
		return o, fmt.Errorf("%w: RotateBytes %d", ErrInvalidOptions, o.RotateBytes)
	}
	switch {
	case o.MaxRecordBytes == 0:
		o.MaxRecordBytes = DefaultMaxRecordBytes
	case o.MaxRecordBytes < MinRecordBytes || o.MaxRecordBytes > DefaultMaxRecordBytes:
		return o, fmt.Errorf("%w: MaxRecordBytes %d outside %d..%d", ErrInvalidOptions, o.MaxRecordBytes, MinRecordBytes, DefaultMaxRecordBytes)
	}
	switch {
	case o.MaxFieldBytes == 0:
		o.MaxFieldBytes = DefaultMaxFieldBytes
	case o.MaxFieldBytes < MinFieldBytes || o.MaxFieldBytes > o.MaxRecordBytes/4:
		return o, fmt.Errorf("%w: MaxFieldBytes %d outside %d..%d", ErrInvalidOptions, o.MaxFieldBytes, MinFieldBytes, o.MaxRecordBytes/4)
	}
	switch {
	case o.MaxListItems == 0:
		o.MaxListItems = DefaultMaxListItems
	case o.MaxListItems < 1 || o.MaxListItems > 1024:
		return o, fmt.Errorf("%w: MaxListItems %d outside 1..1024", ErrInvalidOptions, o.MaxListItems)
	}
	switch {
	case o.MaxTotalBytes == 0 && o.RotateBytes == -1:
		o.MaxTotalBytes = -1 // nothing rotates, so nothing can be pruned
	case o.MaxTotalBytes == 0:
		o.MaxTotalBytes = DefaultMaxTotalBytes
	case o.MaxTotalBytes < -1:
		return o, fmt.Errorf("%w: MaxTotalBytes %d", ErrInvalidOptions, o.MaxTotalBytes)
	}
	if o.MaxTotalBytes > 0 {
		if o.RotateBytes == -1 {
			return o, fmt.Errorf("%w: MaxTotalBytes %d needs rotation (RotateBytes is -1)", ErrInvalidOptions, o.MaxTotalBytes)
		}
		if least := 2 * (o.RotateBytes + int64(o.MaxRecordBytes)); o.MaxTotalBytes < least {
			return o, fmt.Errorf("%w: MaxTotalBytes %d is less than twice a rotated file (RotateBytes %d + MaxRecordBytes %d): %d at least",
				ErrInvalidOptions, o.MaxTotalBytes, o.RotateBytes, o.MaxRecordBytes, least)
		}
	}
	switch {
	case o.LockTimeout == 0:
		o.LockTimeout = DefaultLockTimeout
	case o.LockTimeout < 0:
		return o, fmt.Errorf("%w: LockTimeout %s", ErrInvalidOptions, o.LockTimeout)
	}
	return o, nil
}

// DefaultPath is FLEDGE_AUDIT_LOG, else $XDG_STATE_HOME/fledge/audit.jsonl, else
// ~/.local/state/fledge/audit.jsonl. A relative XDG_STATE_HOME is ignored, as the XDG spec says.
func DefaultPath() (string, error) {
	if p := os.Getenv("FLEDGE_AUDIT_LOG"); p != "" {
		return p, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "fledge", "audit.jsonl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("audit: no default log path: %w", err)
	}
	return filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"), nil
}

// Log is an open, hash-chained audit log. It is safe for concurrent use, and several
// processes may hold the same log open: appends are serialised by a flock on <path>.lock and
// each append re-reads the chain's tail from disk. A Log holds no per-record state.
type Log struct {
	mu     sync.Mutex
	path   string
	dir    string
	opts   Options
	lock   *os.File
	f      *os.File // live file; reopened when another process rotated it
	host   string
	uid    int
	pid    int
	closed bool
	tail   *tailCache // the chain position after our last write, while the file is unchanged
	head   *os.File   // <path>.head: where the chain stood after the last durable append
	// witnessErr is set once the first head or witness failure was reported.
	witnessErr bool
	io         fileIO    // write and fsync; replaced only by tests that inject I/O failures
	gs         groupSync // durable records waiting for a shared fsync (groupsync.go)
	// share is the page shared with other processes appending to this log, so their
	// durable records share fsyncs too (groupshare_linux.go); nil: this process syncs alone.
	share *sharedSync
}

// fileIO is the two calls an append makes on the live file. Tests inject failures here
// (a partial write then EIO, a failed fsync) to check the rollback; the zero value is the
// real thing.
type fileIO struct {
	write func(f *os.File, b []byte) (int, error)
	sync  func(f *os.File) error
}

func (x fileIO) writeTo(f *os.File, b []byte) (int, error) {
	if x.write != nil {
		return x.write(f, b)
	}
	return f.Write(b)
}

func (x fileIO) syncFile(f *os.File) error {
	if x.sync != nil {
		return x.sync(f)
	}
	return f.Sync()
}

// tailCache lets an append skip re-reading the tail when nobody touched the file since our
// own last write: same file, same size, same modification time. Any other writer (another
// fledge process, a rotation, an edit) changes one of them and the tail is read again.
type tailCache struct {
	fi  os.FileInfo
	pos chainPos
}

// remember caches the chain position after a successful write to f.
func (l *Log) remember(f *os.File, pos chainPos) {
	fi, err := f.Stat()
	if err != nil {
		l.tail = nil
		return
	}
	l.tail = &tailCache{fi: fi, pos: pos}
}

// Open opens (creating) the log at path. The directory is created 0700; an existing one
// writable by group/others or owned by another user is refused, group/other read bits are
// dropped. The file is opened O_APPEND|O_NOFOLLOW, 0600: a symlink, a non-regular file or a
// file owned by another user is refused, wider permissions are tightened to 0600. A torn
// tail left by a crash is recovered now (see docs/audit.md), and a tail that was tampered
// with makes Open fail with ErrCorruptTail so no plugin runs on a broken log.
func Open(path string, opts Options) (*Log, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, fmt.Errorf("%w: empty log path", ErrInvalidOptions)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(abs)
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	lock, err := openPrivate(abs+".lock", os.O_RDWR)
	if err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	head, err := openPrivate(abs+HeadSuffix, os.O_RDWR)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l := &Log{path: abs, dir: dir, opts: o, lock: lock, head: head, host: host, uid: os.Getuid(), pid: os.Getpid()}
	if o.Fsync != FsyncNever {
		l.share = openShared(abs + SyncSuffix)
	}
	err = l.locked(func() error {
		f, err := l.liveFile()
		if err != nil {
			return err
		}
		if _, err = l.prepare(f); err != nil {
			return err
		}
		// A lowered MaxTotalBytes takes effect now, not only at the next rotation.
		return l.prune()
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

var _ Recorder = (*Log)(nil)

// Path is the absolute path of the live file.
func (l *Log) Path() string { return l.path }

// Append implements Recorder. It fills r's Schema, Seq, Time (UTC, ns), Host, UID, PID,
// PrevHash and Hash (and replaces Details with a marker if the record was oversized), writes
// the record with one write(2), and fsyncs per the policy. r is untouched on error.
func (l *Log) Append(r *Record, durable bool) error {
	return l.AppendBudget(r, durable, nil)
}

// Budget is an allowance of log bytes (a session's, see core.Recorder). Take is called under
// the log's lock with the exact length of the sealed line (newline included) before it is
// written: an error refuses the record, and nothing is written. Refund gives back the bytes
// of a record whose write failed and was rolled back.
type Budget interface {
	Take(n int) error
	Refund(n int)
}

// ErrBudget is returned (wrapped) by a Budget that has no room for a record.
var ErrBudget = errors.New("audit: the log byte budget is spent")

// AppendBudget is Append charging the record's bytes to b first (nil: no budget). A record
// b refuses is not written and the error wraps b's.
func (l *Log) AppendBudget(r *Record, durable bool, b Budget) error {
	if r == nil {
		return errors.New("audit: nil record")
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	var (
		s    *sealed
		w    *syncWaiter
		wfi  os.FileInfo
		at   int64
		prev chainPos
	)
	err := l.locked(func() error {
		f, start, p, err := l.tailPos()
		if err != nil {
			return err
		}
		prev = p
		if s, err = l.seal(r, prev); err != nil {
			return err
		}
		if err := take(b, len(s.line)+1); err != nil {
			return err
		}
		sync := l.opts.Fsync == FsyncAlways || (durable && l.opts.Fsync == FsyncDurable)
		// The fsync, if any, runs after the lock is released, shared with the records
		// other goroutines write meanwhile (group commit, groupsync.go).
		if err := l.writeAt(f, start, append(s.line, '\n'), false, &prev); err != nil {
			refund(b, len(s.line)+1)
			return err
		}
		pos := chainPos{s.seq, s.hash}
		fi := l.rememberAfter(f, pos)
		if sync {
			w, wfi, at = l.enqueueSync(f, fi, pos, s.time), fi, start
		} else if durable {
			// fsync "never": the head moves now, as after a synced append.
			l.advanceHead(pos, s.time)
		}
		// The record is safely in the live file; a failed rename is retried by the next
		// append, so it must not read as a failed append. A rotation syncs the file first.
		_ = l.maybeRotateInfo(f, fi)
		return nil
	})
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if w != nil {
		if err := l.waitSynced(w); err != nil {
			// Taken back if it is still the last record of the same file (see
			// rollbackOnFailure); either way the caller is told it is not written. The
			// budget keeps the bytes: the record may stay in the file.
			return l.rollbackOnFailure(func() error { return err }, wfi, at, &prev, chainPos{}, time.Time{})()
		}
	}
	s.commit(r)
	return nil
}

// AppendDeferredSync writes r like Append(r, true), but the fsync runs in the background
// and the returned function waits for it. The caller overlaps the flush with other work and
// calls the function right before the act the record must precede (the exec decision: the
// sandbox is prepared while the record syncs; the command starts only once it returned
// nil). It syncs the very file the record went to, even if the log rotated in between, and
// may be called again (from the same goroutine) to get the same result. Under fsync
// "always" the record is synced before this returns; under "never" the function is a no-op.
// A failed write is rolled back before this returns; a failed background fsync is rolled
// back by the returned function if the record is still the live file's last (see write).
func (l *Log) AppendDeferredSync(r *Record) (sync func() error, err error) {
	return l.AppendDeferredSyncBudget(r, nil)
}

// AppendDeferredSyncBudget is AppendDeferredSync charging the record's bytes to b first
// (see AppendBudget). A refused record is not written: the act it precedes must not happen.
func (l *Log) AppendDeferredSyncBudget(r *Record, b Budget) (sync func() error, err error) {
	if r == nil {
		return nil, errors.New("audit: nil record")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	noop := func() error { return nil }
	sync = noop
	err = l.locked(func() error {
		f, start, prev, err := l.tailPos()
		if err != nil {
			return err
		}
		s, err := l.seal(r, prev)
		if err != nil {
			return err
		}
		if err := take(b, len(s.line)+1); err != nil {
			return err
		}
		now := l.opts.Fsync == FsyncAlways
		if err := l.writeAt(f, start, append(s.line, '\n'), now, &prev); err != nil {
			refund(b, len(s.line)+1)
			return err
		}
		pos := chainPos{s.seq, s.hash}
		fi := l.rememberAfter(f, pos)
		if l.opts.Fsync == FsyncDurable {
			if fi == nil {
				return errors.Join(fmt.Errorf("audit: stat %s failed after an append", l.path), l.rollback(f, start, &prev))
			}
			// The record joins the next group commit (groupsync.go) at once, in the
			// background, so the flush overlaps the caller's work and concurrent
			// decisions (pipelined execs) share one fsync instead of one each.
			//
			// Everything after the fsync (the head, a witness checkpoint, the rollback of a
			// failed record) happens in that goroutine too: the caller's wait may run on a
			// launch thread that is already confined (sandbox.Spec.BeforeExec), where file
			// and socket calls would be refused or land in the run's view; it only receives.
			w := l.enqueueSync(f, fi, pos, s.time)
			finish := l.rollbackOnFailure(func() error { return l.waitSynced(w) }, fi, start, &prev, pos, s.time)
			done := make(chan error, 1)
			go func() { done <- finish() }()
			var res error
			waited := false
			sync = func() error {
				if !waited {
					res, waited = <-done, true
				}
				return res
			}
		}
		s.commit(r)
		if l.opts.Fsync != FsyncDurable {
			// Synced already (always), or never synced (never): the head moves now.
			l.advanceHead(pos, s.time)
		}
		_ = l.maybeRotateInfo(f, fi)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sync, nil
}

func take(b Budget, n int) error {
	if b == nil {
		return nil
	}
	return b.Take(n)
}

func refund(b Budget, n int) {
	if b != nil {
		b.Refund(n)
	}
}

// Close releases the files. It does not sync: records needing durability were synced by Append.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	if l.f != nil {
		// Records still waiting for their fsync are synced (and answered) first.
		if err := l.locked(l.closeLive); err != nil {
			l.retireNoHead(l.f)
			errs = append(errs, err)
			if l.f != nil {
				errs = append(errs, l.f.Close())
				l.f = nil
			}
		}
	}
	errs = append(errs, l.lock.Close())
	l.share.close()
	l.share = nil
	if l.head != nil {
		errs = append(errs, l.head.Close())
	}
	if l.opts.Witness != nil {
		if err := l.opts.Witness.Close(); err != nil {
			l.witnessFailed(err)
		}
	}
	return errors.Join(errs...)
}

func (l *Log) locked(fn func() error) error {
	if err := flockWait(l.lock, lockEx, l.opts.LockTimeout); err != nil {
		return err
	}
	defer funlock(l.lock)
	return fn()
}

// liveFile returns the live file, reopening it when another process rotated (renamed) the
// one we hold or it vanished.
func (l *Log) liveFile() (*os.File, error) {
	f, _, err := l.liveFileInfo()
	return f, err
}

// liveFileInfo is liveFile that also returns the fstat of the file it kept (nil when it
// opened a new one), so an append needs no second stat to find where the file ends.
func (l *Log) liveFileInfo() (*os.File, os.FileInfo, error) {
	fi, err := os.Lstat(l.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	if l.f != nil {
		if err == nil {
			if cur, e := l.f.Stat(); e == nil && os.SameFile(fi, cur) {
				return l.f, cur, nil
			}
		}
		_ = l.closeLive()
	}
	f, oerr := openPrivate(l.path, os.O_RDWR|os.O_APPEND)
	if oerr != nil {
		return nil, nil, oerr
	}
	if errors.Is(err, fs.ErrNotExist) && l.opts.Fsync != FsyncNever {
		if err := syncDir(l.dir); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	l.f = f
	return f, nil, nil
}

// tailPos returns the live file, where it ends and where the chain stands: from the cache
// and the one fstat liveFileInfo made when nobody touched the file since our last write,
// else read from disk (prepare, which may repair a torn tail first).
func (l *Log) tailPos() (*os.File, int64, chainPos, error) {
	// The usual case in one lstat: the path still names the file we hold (same inode as our
	// own fstat after our last write) and nobody wrote to it since (same size and mtime).
	if c := l.tail; c != nil && l.f != nil {
		if fi, err := os.Lstat(l.path); err == nil && fi.Mode().IsRegular() && os.SameFile(c.fi, fi) &&
			c.fi.Size() == fi.Size() && c.fi.ModTime().Equal(fi.ModTime()) {
			return l.f, fi.Size(), c.pos, nil
		}
	}
	f, fi, err := l.liveFileInfo()
	if err != nil {
		return nil, 0, chainPos{}, err
	}
	if c := l.tail; c != nil && fi != nil && os.SameFile(c.fi, fi) && c.fi.Size() == fi.Size() && c.fi.ModTime().Equal(fi.ModTime()) {
		return f, fi.Size(), c.pos, nil
	}
	prev, err := l.prepare(f)
	if err != nil {
		return nil, 0, chainPos{}, err
	}
	st, err := f.Stat()
	if err != nil {
		l.tail = nil
		return nil, 0, chainPos{}, fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	return f, st.Size(), prev, nil
}

// rememberAfter caches the chain position after our write to f and returns the file's
// fstat (nil if it failed: then nothing is cached and the next append reads the tail).
func (l *Log) rememberAfter(f *os.File, pos chainPos) os.FileInfo {
	fi, err := f.Stat()
	if err != nil {
		l.tail = nil
		return nil
	}
	l.tail = &tailCache{fi: fi, pos: pos}
	return fi
}

// write appends b (whole records, or a newline) to f under the lock, fsyncing it if sync,
// and returns the offset it started at. prev is where the chain stands before b, or nil
// when the file holds torn bytes that a rollback must leave for the next append to recover.
//
// A write that fails part-way (ENOSPC, EIO) or whose fsync fails is rolled back: the file
// is truncated to where it was, so it still ends on a whole record, `audit verify` passes
// at once (not only after the next append recovers a torn tail), and the next append
// continues the chain from prev. A failed fsync is rolled back too: the caller was told the
// record is not written and will not act on it, so the log must not claim it.
func (l *Log) write(f *os.File, b []byte, sync bool, prev *chainPos) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		l.tail = nil
		return 0, fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	start := fi.Size()
	return start, l.writeAt(f, start, b, sync, prev)
}

// writeAt is write for a caller that knows the file ends at start (it stat'ed it under the
// same lock).
func (l *Log) writeAt(f *os.File, start int64, b []byte, sync bool, prev *chainPos) error {
	// os.File.Write is one write(2) unless the kernel writes short; under the lock and with
	// O_APPEND a retry of the rest still lands contiguously.
	if _, err := l.io.writeTo(f, b); err != nil {
		return errors.Join(fmt.Errorf("audit: append to %s: %w", l.path, err), l.rollback(f, start, prev))
	}
	if sync {
		if err := l.io.syncFile(f); err != nil {
			return errors.Join(fmt.Errorf("audit: fsync %s: %w", l.path, err), l.rollback(f, start, prev))
		}
	}
	return nil
}

// ErrRollback says a failed append could not be taken back: its bytes stay at the end of
// the file as a torn tail, which the next append recovers with a log_recovered record.
var ErrRollback = errors.New("audit: could not roll back a failed append")

// rollback truncates f back to size start (the end of the last whole record) after a
// failed write, and puts the cached chain position back at prev (if not nil). Truncating
// frees space, so it works on a full disk. Must be called under the lock.
func (l *Log) rollback(f *os.File, start int64, prev *chainPos) error {
	l.tail = nil
	if err := f.Truncate(start); err != nil {
		return fmt.Errorf("%w: truncate %s to %d: %w", ErrRollback, l.path, start, err)
	}
	// The torn bytes may have reached the disk already (writeback): make their removal
	// durable too. If this fails the truncation still holds in the page cache; a crash
	// could bring the torn bytes back, which the next append then recovers.
	if l.opts.Fsync != FsyncNever {
		if err := l.io.syncFile(f); err != nil {
			return fmt.Errorf("%w: fsync %s after truncating it: %w", ErrRollback, l.path, err)
		}
	}
	if prev != nil {
		l.remember(f, *prev)
		l.resetHead(*prev)
	}
	return nil
}

// rollbackOnFailure wraps the wait of a deferred fsync: if the fsync fails, the record is
// taken back as Append would, as long as it is still the last thing in the same live file
// (fi, ending at its size). Once another record chained to it, or the file rotated, it
// stays: it is whole, so the log still verifies, and the caller still does not act on it.
//
// Once the fsync succeeded, the head advances to the record (pos, written at t).
func (l *Log) rollbackOnFailure(wait func() error, fi os.FileInfo, start int64, prev *chainPos, pos chainPos, t time.Time) func() error {
	var res error
	done := false
	return func() error {
		if done {
			return res
		}
		done = true
		res = wait()
		if res == nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			if !l.closed {
				_ = l.locked(func() error { l.advanceHeadLate(pos, t); return nil })
			}
			return nil
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return res
		}
		err := l.locked(func() error {
			f := l.f
			if f == nil {
				return nil // rotated: leave it
			}
			cur, err := f.Stat()
			if err != nil {
				return err
			}
			atPath, err := os.Lstat(l.path)
			if err != nil || !os.SameFile(cur, fi) || !os.SameFile(atPath, fi) || cur.Size() != fi.Size() {
				return nil // rotated, replaced, or records chained after it: leave it
			}
			return l.rollback(f, start, prev)
		})
		res = errors.Join(res, err)
		return res
	}
}

// chainPos is where the chain stands: the last record's seq and hash.
type chainPos struct {
	seq  uint64
	hash string
}

var genesis = chainPos{0, ZeroHash}

// prepare reads the chain's tail from disk (never from memory: another process may have
// appended) and repairs a torn tail: it terminates the torn bytes and appends a
// log_recovered record naming them, chained to the last complete record.
//
// A tail read from disk is then checked against the head: a log shorter than its head gets
// a log_truncated record (see checkTruncated).
func (l *Log) prepare(f *os.File) (chainPos, error) {
	fi, err := f.Stat()
	if err != nil {
		return chainPos{}, err
	}
	if c := l.tail; c != nil && os.SameFile(c.fi, fi) && c.fi.Size() == fi.Size() && c.fi.ModTime().Equal(fi.ModTime()) {
		return c.pos, nil
	}
	l.tail = nil
	pos, err := l.prepareTail(f, fi)
	if err != nil {
		return chainPos{}, err
	}
	return l.checkTruncated(f, pos)
}

// prepareTail reads the chain's tail from f (of info fi) and recovers a torn tail.
func (l *Log) prepareTail(f *os.File, fi os.FileInfo) (chainPos, error) {
	var err error
	ti := &tailInfo{}
	if fi.Size() > 0 {
		if ti, err = readTail(f, fi.Size()); err != nil {
			return chainPos{}, err
		}
	}
	if !ti.found {
		if ti.prev, err = rotatedTail(l.path); err != nil {
			return chainPos{}, err
		}
	}
	if ti.needNL {
		// A complete, valid record lost only its newline: terminate it, nothing was lost.
		_, err := l.write(f, []byte{'\n'}, l.opts.Fsync != FsyncNever, nil)
		return ti.prev, err
	}
	if len(ti.region) == 0 {
		return ti.prev, nil
	}
	if len(ti.region) > maxRegionBytes {
		return chainPos{}, fmt.Errorf("%w: %d unreadable bytes at the end of %s", ErrCorruptTail, len(ti.region), l.path)
	}
	var buf []byte
	skipped := ti.region
	if skipped[len(skipped)-1] != '\n' {
		buf = append(buf, '\n')
		skipped = append(skipped[:len(skipped):len(skipped)], '\n')
	}
	sum := sha256.Sum256(skipped)
	rec := &Record{
		Event:    EventLogRecovered,
		Decision: Error,
		Reason:   string(reason.Crashed),
		Details: map[string]any{
			DetailSkippedOffset: ti.regionStart,
			DetailSkippedBytes:  len(skipped),
			DetailSkippedSHA256: hex.EncodeToString(sum[:]),
			DetailMessage:       "a write was cut short (crash?); the torn bytes are kept and skipped",
		},
	}
	s, err := l.seal(rec, ti.prev)
	if err != nil {
		return chainPos{}, err
	}
	buf = append(append(buf, s.line...), '\n')
	// A failed write here is rolled back to the torn bytes, which the next append tries to
	// recover again.
	if _, err := l.write(f, buf, l.opts.Fsync != FsyncNever, nil); err != nil {
		return chainPos{}, err
	}
	return chainPos{s.seq, s.hash}, nil
}

// sealed is a record ready to write: its line and the fields Append gives back to the caller.
type sealed struct {
	line    []byte
	seq     uint64
	hash    string
	time    time.Time
	prev    string
	host    string
	uid     int
	pid     int
	details map[string]any
	replace bool // details were replaced (truncated, unencodable or redacted)
	plugin  *PluginRef
	redact  bool // the plugin reference was redacted
}

func (s *sealed) commit(r *Record) {
	r.Schema, r.Seq, r.Time, r.PrevHash, r.Hash = SchemaVersion, s.seq, s.time, s.prev, s.hash
	r.Host, r.UID, r.PID = s.host, s.uid, s.pid
	if s.replace {
		r.Details = s.details
	}
	if s.redact {
		r.Plugin = s.plugin
	}
}

// seal fills the writer-owned fields on a copy of r, chains it to prev and encodes it within
// MaxRecordBytes.
func (l *Log) seal(r *Record, prev chainPos) (*sealed, error) {
	c := *r
	c.Schema = SchemaVersion
	c.Seq = prev.seq + 1
	c.Time = time.Now().UTC()
	c.Host, c.UID, c.PID = l.host, l.uid, l.pid
	c.PrevHash = prev.hash
	c.Hash = ""
	s := &sealed{seq: c.Seq, time: c.Time, prev: c.PrevHash, host: c.Host, uid: c.UID, pid: c.PID}

	n, err := normalizeFast(&c)
	if err != nil {
		// Unencodable details (NaN, a channel...) must not cost the record: say why instead.
		c.Details = map[string]any{DetailEncodeError: err.Error()}
		s.details, s.replace = c.Details, true
		if n, err = normalizeFast(&c); err != nil {
			return nil, fmt.Errorf("audit: encode record: %w", err)
		}
	}
	// Secrets first, so that a bound cutting a string never keeps part of a value.
	if l.opts.Redact.redactRecord(n) {
		c.Plugin, c.Details = n.Plugin, n.Details
		s.details, s.replace, s.plugin, s.redact = c.Details, true, c.Plugin, true
	}
	if boundRecord(n, l.opts.MaxFieldBytes, l.opts.MaxListItems) {
		// The cut values (and the fields_truncated count) are plain Go values: normalise
		// again so the stored line stays a fixed point of encoding.
		if n, err = normalizeFast(n); err != nil {
			return nil, fmt.Errorf("audit: encode bounded record: %w", err)
		}
		c.Session, c.Event, c.Reason, c.Decision, c.Plugin, c.Sandbox = n.Session, n.Event, n.Reason, n.Decision, n.Plugin, n.Sandbox
		c.Details = n.Details
		s.details, s.replace = c.Details, true
	}
	b, err := body(n)
	if err != nil {
		return nil, err
	}
	if size := lineLen(b); size > l.opts.MaxRecordBytes {
		if b, err = l.shrink(&c, n, size); err != nil {
			return nil, err
		}
		s.details, s.replace = c.Details, true
	}
	s.hash = hashOf(b)
	s.line = withHash(b, s.hash)
	return s, nil
}

func lineLen(body []byte) int { return len(body) - 1 + hashTailLen + 1 }

// shrink replaces oversized details with a marker (original size, SHA-256 of the original
// details JSON, and as long a preview as fits), cutting long caller strings if still needed.
func (l *Log) shrink(c, n *Record, size int) ([]byte, error) {
	var orig []byte
	if n.Details != nil {
		orig, _ = marshalCompact(n.Details)
	}
	marker := func(preview string) map[string]any {
		return map[string]any{
			DetailTruncated:  true,
			DetailOrigBytes:  size,
			DetailOrigSHA256: hashOf(orig),
			DetailPreview:    preview,
		}
	}
	try := func(preview string) ([]byte, int, error) {
		c.Details = marker(preview)
		nn, err := normalize(c)
		if err != nil {
			return nil, 0, err
		}
		b, err := body(nn)
		if err != nil {
			return nil, 0, err
		}
		return b, lineLen(b) - l.opts.MaxRecordBytes, nil
	}
	_, over, err := try("")
	if err != nil {
		return nil, err
	}
	if over > 0 {
		capStrings(c)
		if _, over, err = try(""); err != nil {
			return nil, err
		}
		if over > 0 {
			return nil, fmt.Errorf("%w: %d bytes over %d", ErrRecordTooLarge, over, l.opts.MaxRecordBytes)
		}
	}
	// Each round removes at least `over` encoded bytes, so this ends.
	preview := clip.Prefix(string(orig), -over)
	for {
		pb, pover, err := try(preview)
		if err != nil {
			return nil, err
		}
		if pover <= 0 {
			return pb, nil
		}
		preview = clip.Prefix(preview, len(preview)-pover)
	}
}

func capStrings(c *Record) {
	cut := func(s *string) {
		if len(*s) > capString {
			*s = clip.Prefix(*s, capString) + "…"
		}
	}
	cut(&c.Session)
	cut(&c.Event)
	cut(&c.Reason)
	cut((*string)(&c.Decision))
	cut(&c.Host)
	if c.Plugin != nil {
		p := *c.Plugin
		cut(&p.Name)
		cut(&p.Version)
		cut(&p.Source)
		cut(&p.ManifestDigest)
		c.Plugin = &p
	}
	if c.Sandbox != nil {
		s := *c.Sandbox
		cut(&s.Mode)
		cut(&s.CgroupMode)
		c.Sandbox = &s
	}
}

// tailInfo is what readTail found at the end of a file.
type tailInfo struct {
	found       bool     // a valid record was found
	prev        chainPos // ... and this is where it leaves the chain
	needNL      bool     // it is the final bytes of the file, without its newline
	regionStart int64    // offset of the bytes after it (or 0 when !found)
	region      []byte   // unparseable bytes after it: a torn write
}

// readTail finds the last valid record of f and what follows it, reading backwards from the
// end in a window that grows to at most MaxLineBytes+maxRegionBytes.
func readTail(f *os.File, size int64) (*tailInfo, error) {
	const maxWin = int64(MaxLineBytes + maxRegionBytes)
	win := int64(4096)
	for {
		if win > size {
			win = size
		}
		base := size - win
		buf := make([]byte, win)
		if _, err := f.ReadAt(buf, base); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("audit: read tail of %s: %w", f.Name(), err)
		}
		ti, err := scanTail(buf, base)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorruptTail, f.Name(), err)
		}
		if ti != nil {
			return ti, nil
		}
		if win >= maxWin {
			return nil, fmt.Errorf("%w: no complete record in the last %d bytes of %s", ErrCorruptTail, win, f.Name())
		}
		win = min(win*8, maxWin)
	}
}

// scanTail walks buf (the bytes [base, base+len(buf)) of a file that ends there) backwards
// line by line. Lines that are not JSON at all are torn bytes; a line that is JSON must be a
// valid record, or the tail was tampered with. nil, nil means the window is too small.
func scanTail(buf []byte, base int64) (*tailInfo, error) {
	pos := len(buf)
	final := true
	for {
		j := bytes.LastIndexByte(buf[:pos], '\n')
		if j < 0 && base > 0 {
			return nil, nil
		}
		seg := buf[j+1 : pos]
		if !(final && len(seg) == 0) && json.Valid(seg) {
			r, lerr := parseLine(seg)
			if lerr != nil {
				return nil, fmt.Errorf("record at offset %d: %v", base+int64(j+1), lerr)
			}
			ti := &tailInfo{found: true, prev: chainPos{r.Seq, r.Hash}}
			if final {
				ti.needNL, ti.regionStart = true, base+int64(len(buf))
			} else {
				ti.regionStart, ti.region = base+int64(pos)+1, buf[pos+1:]
			}
			return ti, nil
		}
		final = false
		if j < 0 {
			return &tailInfo{region: buf}, nil
		}
		pos = j
	}
}

// rotatedFile is one rotated file: <live>.<n>, a larger n is newer.
type rotatedFile struct {
	n    uint64
	path string
}

func rotatedName(live string, n uint64) string { return fmt.Sprintf("%s.%06d", live, n) }

// listRotated returns the rotated files of live, oldest first.
func listRotated(live string) ([]rotatedFile, error) {
	dir, base := filepath.Split(live)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []rotatedFile
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base+".")
		if !ok || rest == "" || len(rest) > 18 || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		n, err := strconv.ParseUint(rest, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, rotatedFile{n, filepath.Join(dir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out, nil
}

// rotatedTail is where the newest rotated file leaves the chain (genesis if none).
func rotatedTail(live string) (chainPos, error) {
	rs, err := listRotated(live)
	if err != nil || len(rs) == 0 {
		return genesis, err
	}
	return fileTail(rs[len(rs)-1].path)
}

// fileTail is where a rotated file leaves the chain. A rotated file is only ever renamed
// after a complete write, so anything but a whole last record is tampering.
func fileTail(path string) (chainPos, error) {
	f, err := openReadOnly(path)
	if err != nil {
		return chainPos{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return chainPos{}, err
	}
	if fi.Size() == 0 {
		return chainPos{}, fmt.Errorf("%w: rotated file %s is empty", ErrCorruptTail, path)
	}
	ti, err := readTail(f, fi.Size())
	if err != nil {
		return chainPos{}, err
	}
	if !ti.found || ti.needNL || len(ti.region) > 0 {
		return chainPos{}, fmt.Errorf("%w: rotated file %s does not end with a complete record", ErrCorruptTail, path)
	}
	return ti.prev, nil
}

// maybeRotateInfo rotates the live file f once it reached RotateBytes; fi is its fstat
// (nil: it stats it).
func (l *Log) maybeRotateInfo(f *os.File, fi os.FileInfo) error {
	if l.opts.RotateBytes < 0 {
		return nil
	}
	if fi == nil {
		var err error
		if fi, err = f.Stat(); err != nil {
			return err
		}
	}
	if fi.Size() < l.opts.RotateBytes {
		return nil
	}
	rs, err := listRotated(l.path)
	if err != nil {
		return err
	}
	next := uint64(1)
	if len(rs) > 0 {
		next = rs[len(rs)-1].n + 1
	}
	if err := os.Rename(l.path, rotatedName(l.path, next)); err != nil {
		return err
	}
	// Records still waiting for their fsync are synced before the file is closed.
	_ = l.closeLive()
	if l.opts.Fsync != FsyncNever {
		if err := syncDir(l.dir); err != nil {
			return err
		}
	}
	return l.prune()
}
