// SPDX-License-Identifier: MIT

//go:build unix

package safefs

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dirFlags open a directory handle that is never a symlink: O_NOFOLLOW makes a symlink
// fail (ELOOP, or ENOTDIR with O_DIRECTORY on some systems) instead of being followed.
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openRoot opens root as given: it is a path fledge trusts (its own config dir, a data dir
// it made); only what lies beneath it is checked.
func openRoot(root string) (int, error) {
	for {
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: root, Err: err}
		}
		return fd, nil
	}
}

// refusal turns the errno of a no-follow open of elem in dirfd into an error: ELOOP (and
// ENOTDIR where elem is a symlink) is ErrUnsafePath.
func refusal(root, rel string, dirfd int, elem string, err error) error {
	if err == unix.ELOOP || err == unix.EMLINK || err == unix.ENOTDIR {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, elem, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return &UnsafePathError{Root: root, Rel: rel, Why: elem + " is a symlink"}
		}
		if err == unix.ENOTDIR {
			return &UnsafePathError{Root: root, Rel: rel, Why: elem + " is not a directory"}
		}
	}
	return &os.PathError{Op: "openat", Path: filepath.Join(root, rel), Err: err}
}

// walk opens elems one by one beneath dirfd (which it does not close), creating missing
// ones with perm when create is set. It returns the last one's fd.
func walk(root, rel string, dirfd int, elems []string, create bool, perm os.FileMode) (int, error) {
	cur := dirfd
	for _, e := range elems {
		if create {
			if err := unix.Mkdirat(cur, e, uint32(perm.Perm())); err != nil && err != unix.EEXIST {
				if cur != dirfd {
					unix.Close(cur)
				}
				return -1, &os.PathError{Op: "mkdirat", Path: filepath.Join(root, rel), Err: err}
			}
		}
		next, err := unix.Openat(cur, e, dirFlags, 0)
		if err != nil {
			err = refusal(root, rel, cur, e, err)
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	if cur == dirfd {
		return unix.Dup(dirfd)
	}
	return cur, nil
}

// OpenDir opens the directory rel beneath root, refusing a symlink in any element of rel.
func OpenDir(root, rel string) (*os.File, error) {
	elems, err := split(root, rel)
	if err != nil {
		return nil, err
	}
	rfd, err := openRoot(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	fd, err := openBeneath(root, rel, rfd, elems)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}

// MkdirAll makes the directory rel beneath root and every missing directory on the way
// (perm, before umask, as os.MkdirAll), refusing a symlink in any element of rel. root
// must exist.
func MkdirAll(root, rel string, perm os.FileMode) error {
	elems, err := split(root, rel)
	if err != nil {
		return err
	}
	rfd, err := openRoot(root)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	fd, err := walk(root, rel, rfd, elems, true, perm)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// parent opens the directory holding rel's last element beneath root and returns it with
// that element's name. rel must name something beneath root (not root itself).
func parent(root, rel string) (*os.File, string, error) {
	elems, err := split(root, rel)
	if err != nil {
		return nil, "", err
	}
	if len(elems) == 0 {
		return nil, "", &UnsafePathError{Root: root, Rel: rel, Why: "names the root itself"}
	}
	dir, err := OpenDir(root, filepath.Join(elems[:len(elems)-1]...))
	if err != nil {
		return nil, "", err
	}
	return dir, elems[len(elems)-1], nil
}

// Mkdir makes the directory rel beneath root (its parent must exist), refusing a symlink in
// any element of rel; an existing entry is an error matching os.ErrExist.
func Mkdir(root, rel string, perm os.FileMode) error {
	dir, name, err := parent(root, rel)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := unix.Mkdirat(int(dir.Fd()), name, uint32(perm.Perm())); err != nil {
		return &os.PathError{Op: "mkdirat", Path: filepath.Join(root, rel), Err: err}
	}
	return nil
}

// CreateExcl creates the file rel beneath root for writing (O_EXCL: an existing entry, a
// symlink included, is an error matching os.ErrExist), refusing a symlink in any element
// of rel.
func CreateExcl(root, rel string, perm os.FileMode) (*os.File, error) {
	dir, name, err := parent(root, rel)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(root, rel), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}

// Lstat stats rel beneath root without following a symlink in any element, the last one
// included (a symlink there is reported as one, as os.Lstat).
func Lstat(root, rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	dir, name, err := parent(root, rel)
	if err != nil {
		return st, err
	}
	defer dir.Close()
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "fstatat", Path: filepath.Join(root, rel), Err: err}
	}
	return st, nil
}

// RenameNoReplace renames rel beneath root to newName in the same directory, refusing a
// symlink in any element of rel's directory (rel's last element itself may be anything: it
// is renamed, not followed) and an existing newName (an error matching os.ErrExist).
func RenameNoReplace(root, rel, newName string) error {
	if newName == "" || newName == "." || newName == ".." || filepath.Base(newName) != newName {
		return &UnsafePathError{Root: root, Rel: newName, Why: "not a name in one directory"}
	}
	dir, name, err := parent(root, rel)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := renameNoReplace(int(dir.Fd()), name, newName); err != nil {
		return &os.LinkError{Op: "renameat", Old: filepath.Join(root, rel), New: newName, Err: err}
	}
	return nil
}
