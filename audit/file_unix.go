// SPDX-License-Identifier: MIT

//go:build unix

package audit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openFlags never follow a symlink at the last component and never block on a FIFO.
const openFlags = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

func wrapOpenErr(path string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("%w: %s", ErrSymlink, path)
	}
	return err
}

// ensureDir creates dir 0700, or checks an existing one: owned by us (or root) and not
// writable by group/other (refused: someone else could already have swapped files in it);
// group/other read or search bits are dropped.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	euid := os.Geteuid()
	if int(st.Uid) != euid && st.Uid != 0 {
		return fmt.Errorf("%w: directory %s is owned by uid %d, not %d", ErrInsecurePerms, dir, st.Uid, euid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%w: directory %s is writable by group or others (mode %#o)", ErrInsecurePerms, dir, st.Mode&0o7777)
	}
	if st.Mode&0o055 != 0 && int(st.Uid) == euid {
		if err := unix.Fchmod(fd, uint32(st.Mode&0o7700)); err != nil {
			return &os.PathError{Op: "chmod", Path: dir, Err: err}
		}
	}
	return nil
}

// openPrivate opens (creating) path for read+append as a regular file owned by us, mode
// 0600. Wider permissions on an existing file are tightened through the open descriptor, so
// there is no window where a swapped file gets chmodded.
func openPrivate(path string, flags int) (*os.File, error) {
	f, err := os.OpenFile(path, flags|os.O_CREATE|openFlags, 0o600)
	if err != nil {
		return nil, wrapOpenErr(path, err)
	}
	if err := checkPrivate(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkPrivate(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %s", ErrNotRegular, f.Name())
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrInsecurePerms, f.Name(), st.Uid, euid)
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Fchmod(int(f.Fd()), 0o600); err != nil {
			return &os.PathError{Op: "chmod", Path: f.Name(), Err: err}
		}
	}
	return nil
}

// openReadOnly opens an existing log file for reading without following a symlink.
func openReadOnly(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, wrapOpenErr(path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotRegular, path)
	}
	return f, nil
}

// flockWait takes a flock of kind how (LOCK_EX or LOCK_SH) on f, polling so the wait is
// bounded by timeout.
func flockWait(f *os.File, how int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	backoff := 500 * time.Microsecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("audit: lock %s: %w", f.Name(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s: %s", ErrLockTimeout, timeout, f.Name())
		}
		time.Sleep(backoff)
		if backoff < 20*time.Millisecond {
			backoff *= 2
		}
	}
}

const (
	lockEx = unix.LOCK_EX
	lockSh = unix.LOCK_SH
)

func funlock(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_UN)
}

// syncDir makes a rename or create in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fileIno is fi's inode number (0 when unknown).
func fileIno(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino) //nolint:unconvert // not uint64 on every unix
	}
	return 0
}
