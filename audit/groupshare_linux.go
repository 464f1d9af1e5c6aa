// SPDX-License-Identifier: MIT

package audit

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Group commit across processes. Several fledge processes appending to one log (concurrent
// hosts, a serve beside a `fledge PLUGIN`) each flush the same file: one fsync of the file
// makes every record written to it before the fsync started durable, whoever wrote it. The
// processes share a page (<log>.sync, mapped) that counts the durable records written to the
// live file and says up to which count an fsync has covered them; a process whose records
// are covered does not fsync again, and one that finds another process's fsync running waits
// for it (a futex on the page) instead of starting its own.
//
// A record is reported durable only by an fsync that started after its write(2) returned:
// the count is raised under the log's lock after the write, and a leader reads it before its
// fsync starts, so the count it publishes covers only records already written. Counts are
// per live file (a generation in the high 32 bits, raised whenever a writer finds another
// file at the log's path, and started at a random value whenever the page is made anew, so
// a count read from an older page is never taken for one of the new), and a count is
// trusted only for the file it names; anything unexpected (no page, another generation, a
// leader that does not finish within shareWait) falls back to the process's own fsync.
//
// Which processes hold the log open is asked of the kernel, not counted on the page: each
// holds a shared open-file-description lock on one byte past the page for as long as its Log
// is open, which the kernel drops when the process exits however it exits (a SIGKILL
// included), so a process killed with the log open is not waited for. A page cut short under
// the mapping (truncated by another process of the user, or by logrotate's copytruncate)
// would be a SIGBUS on the next access: every access runs with faults turned into a
// recovered panic, and a Log that meets one gives the page up and syncs alone; the next
// process to open the log makes the page anew.

// SyncSuffix names the shared page of the cross-process group commit: <log path> + SyncSuffix.
const SyncSuffix = ".sync"

const (
	sharePage  = 4096
	shareMagic = 0x666c656467657331 // "fledges1"
	// holderByte is the byte (past the page) each process holding the log open keeps a shared
	// lock on: the kernel's list of its holders, which a killed process leaves.
	holderByte = sharePage
	// shareWait bounds the wait for another process's fsync before syncing ourselves. A
	// leader that died is noticed sooner (its flock goes with it); this bound is for one alive
	// but not finishing (stopped). It is well above a slow fsync under load: at 20 ms a
	// loaded machine's fsyncs outlasted it and every process synced alone, turning sharing
	// off where it pays most.
	shareWait = 500 * time.Millisecond
	// shareNap bounds one futex wait (a leader that died is noticed by its lock's release).
	shareNap = 2 * time.Millisecond
	// The futex operations (linux/futex.h), shared between processes (not _PRIVATE).
	futexWait = 0
	futexWake = 1
)

// The page's words (8-byte aligned uint64s; the futex word is the low half of wake).
const (
	wMagic   = 0
	_        = 1 // once a count of the processes holding the log open (holderByte now)
	wIno     = 2 // device and inode of the live file the counts are of (mixed)
	wWritten = 3 // generation<<32 | durable records written to that file
	wSynced  = 4 // generation<<32 | the count an fsync started after has covered
	wWake    = 5 // raised after every leader's fsync; waiters sleep on it
)

type sharedSync struct {
	f    *os.File // holds the leader's flock and this process's holder lock
	fd   uintptr
	page []byte
	// lost is set once an access to the page faulted (the file was cut short): from then
	// on this Log syncs alone.
	lost atomic.Bool
}

func (s *sharedSync) word(i int) *uint64 { return (*uint64)(unsafe.Pointer(&s.page[i*8])) }

// localFS are the filesystems whose shared mappings every process appending to the log
// sees alike and whose fsync flushes what any process wrote to the file: local ones. A log
// on a network filesystem (NFS, SMB, FUSE, 9p, Ceph) may be appended to from another
// machine, whose page and dirty data this one does not share: there each process syncs
// alone.
var localFS = map[int64]bool{
	0xEF53:     true, // ext2/3/4
	0x58465342: true, // xfs
	0x9123683E: true, // btrfs
	0x01021994: true, // tmpfs
	0xF2F52010: true, // f2fs
	0x2FC12FC1: true, // zfs
	0x794C7630: true, // overlayfs (its upper layer is local)
}

// openShared maps path's page (creating it); nil when it cannot, or when the log's
// filesystem is not a local one (the log then syncs alone).
func openShared(path string) *sharedSync {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &fs); err != nil || !localFS[int64(fs.Type)] {
		return nil
	}
	f, err := openPrivate(path, os.O_RDWR)
	if err != nil {
		return nil
	}
	fail := func() *sharedSync { f.Close(); return nil }
	// Made and checked under its own lock: two processes opening the log at once agree.
	if err := flockWait(f, lockEx, DefaultLockTimeout); err != nil {
		return fail()
	}
	defer funlock(f)
	fi, err := f.Stat()
	if err != nil {
		return fail()
	}
	if fi.Size() != sharePage {
		if err := f.Truncate(0); err != nil {
			return fail()
		}
		if err := f.Truncate(sharePage); err != nil {
			return fail()
		}
	}
	page, err := unix.Mmap(int(f.Fd()), 0, sharePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail()
	}
	s := &sharedSync{f: f, fd: f.Fd(), page: page}
	held := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: holderByte, Len: 1}
	if unix.FcntlFlock(s.fd, unix.F_OFD_SETLK, &held) != nil {
		_ = unix.Munmap(page)
		return fail()
	}
	if !s.guard(func() {
		if atomic.LoadUint64(s.word(wMagic)) != shareMagic {
			for i := 0; i < sharePage/8; i++ {
				atomic.StoreUint64(s.word(i), 0)
			}
			atomic.StoreUint64(s.word(wWritten), uint64(rand.Uint32())<<32)
			atomic.StoreUint64(s.word(wMagic), shareMagic)
		}
	}) {
		_ = unix.Munmap(page)
		return fail()
	}
	return s
}

// guard runs fn, an access to the page, with a fault turned into a panic it recovers: the
// page cut short under the mapping. It reports whether fn ran whole; once one faulted the
// page is given up (lost) and guard runs nothing.
func (s *sharedSync) guard(fn func()) (ok bool) {
	if s.lost.Load() {
		return false
	}
	was := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(was)
		if r := recover(); r != nil {
			if e, isErr := r.(runtime.Error); !isErr || !isFault(e) {
				panic(r)
			}
			s.lost.Store(true)
			ok = false
		}
	}()
	fn()
	return true
}

// isFault reports whether a runtime error is a memory fault (they carry its address).
func isFault(e runtime.Error) bool {
	_, ok := e.(interface{ Addr() uintptr })
	return ok
}

func (s *sharedSync) close() {
	if s == nil {
		return
	}
	_ = unix.Munmap(s.page)
	_ = s.f.Close()
}

// others reports whether another process (or another Log of this one) holds the log open:
// whether any lock on holderByte is held but this Log's own. An error counts as yes (the
// leader's lock and its bounded wait are then taken, as with company).
func (s *sharedSync) others() bool {
	probe := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: holderByte, Len: 1}
	if err := unix.FcntlFlock(s.fd, unix.F_OFD_GETLK, &probe); err != nil {
		return true
	}
	return probe.Type != unix.F_UNLCK
}

// fileKey identifies a live file for the page (0: unknown).
func fileKey(fi os.FileInfo) uint64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	return uint64(st.Dev)<<48 ^ st.Ino
}

// wrote counts a durable record just written to the file of key and returns its place in
// the count (0: not shareable). Called under the log's lock (and flock), after the write.
func (s *sharedSync) wrote(key uint64) uint64 {
	if s == nil || key == 0 {
		return 0
	}
	var e uint64
	if !s.guard(func() {
		if atomic.LoadUint64(s.word(wIno)) != key {
			gen := atomic.LoadUint64(s.word(wWritten))>>32 + 1
			atomic.StoreUint64(s.word(wWritten), gen<<32)
			atomic.StoreUint64(s.word(wIno), key)
		}
		e = atomic.AddUint64(s.word(wWritten), 1)
	}) {
		return 0
	}
	if uint32(e) == ^uint32(0) || e == 0 {
		return 0 // the count would wrap: sync alone until the next file
	}
	return e
}

// covered reports whether an fsync that started after record e was written has finished.
// Called inside guard.
func (s *sharedSync) covered(e uint64) bool {
	d := atomic.LoadUint64(s.word(wSynced))
	return d>>32 == e>>32 && d >= e
}

// publish records that every record up to start (read before an fsync of its file began)
// is on disk, and wakes the waiters. A count of a generation that is no longer the page's
// (the log rotated, or the page was made anew) is not published. Called inside guard.
func (s *sharedSync) publish(start uint64) {
	for {
		d := atomic.LoadUint64(s.word(wSynced))
		if d>>32 == start>>32 && d >= start {
			break
		}
		if atomic.LoadUint64(s.word(wWritten))>>32 != start>>32 {
			break
		}
		if atomic.CompareAndSwapUint64(s.word(wSynced), d, start) {
			break
		}
	}
	s.wake()
}

func (s *sharedSync) wake() {
	atomic.AddUint64(s.word(wWake), 1)
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(s.word(wWake))), futexWake, uintptr(1<<30), 0, 0, 0)
}

// nap sleeps until a leader wakes the page (its value moved from v) or shareNap passed.
func (s *sharedSync) nap(v uint32) {
	ts := unix.NsecToTimespec(int64(shareNap))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(s.word(wWake))), futexWait, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// syncFor makes record e of f durable: at once when another process's fsync covered it,
// after waiting for one that is running, or with an fsync of its own (published for the
// others). Without a page (or e 0, or a page lost) it is f's fsync.
func (l *Log) syncFor(f *os.File, e uint64) error {
	s := l.share
	if s == nil || e == 0 {
		return l.io.syncFile(f)
	}
	var done, leader bool
	var start uint64
	ok := s.guard(func() {
		if s.covered(e) {
			done = true
			return
		}
		deadline := time.Now().Add(shareWait)
		for s.others() {
			v := uint32(atomic.LoadUint64(s.word(wWake)))
			if s.covered(e) {
				done = true
				return
			}
			err := unix.Flock(int(s.fd), unix.LOCK_EX|unix.LOCK_NB)
			if err == nil {
				leader = true
				if s.covered(e) {
					done = true
					return
				}
				break
			}
			if (err != unix.EWOULDBLOCK && err != unix.EINTR) || time.Now().After(deadline) {
				break // no leader to wait for: our own fsync
			}
			s.nap(v)
		}
		start = atomic.LoadUint64(s.word(wWritten))
	})
	if leader {
		defer funlock(s.f)
	}
	if ok && done {
		return nil
	}
	err := l.io.syncFile(f)
	if ok {
		s.guard(func() {
			if err == nil && start>>32 == e>>32 && start >= e {
				s.publish(start)
			} else {
				s.wake()
			}
		})
	}
	return err
}
