// SPDX-License-Identifier: MIT

package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
)

// Every run gets a private TMPDIR of its own. Making a fresh directory per run and removing
// it afterwards was the largest single CPU cost of a short exec (docs/performance.md): on
// ext4 each mkdir scans past every recently deleted inode, so the cost grew with the exec
// rate, and the new path each time defeated the Landlock ruleset cache (its key holds the
// path), rebuilding ~120 rules per exec.
//
// So a finished run's TMPDIR is emptied and handed to a later run of the same plugin,
// only when nothing of the finished run can still reach it: its whole tree was killed and
// its cgroup seen empty (no survivor that left the process group), and the directory is
// still the very inode made for it, owned by fledge. Emptying removes every entry, every
// extended attribute (ACLs included) and resets the mode to 0700. What else the owner of a
// directory can set on its inode without capabilities cannot be undone by emptying, or
// not at all: chattr flags (noatime, sync, dirsync, nodump, topdir, project inherit,
// no-CoW, compression), a project id and extent size hints (FS_IOC_FSSETXATTR), an fscrypt
// policy or the casefold flag on an empty directory (both one-way), a group it belongs to.
// So a directory whose inode attributes differ from those it had when fledge made it is
// removed, not reused (checkEmptyFD). The run has no capabilities: no owner change, no
// immutable or append-only flag, no security.* attributes. At any moment a TMPDIR belongs
// to at most one run; the pool never grows past maxFreeTmps directories, and Close
// removes them.

// Pool bounds: directories kept in all, and per plugin.
const (
	maxFreeTmps       = 16
	maxFreeTmpsPerKey = 4
	// maxTmpXattrList bounds the attribute list read from a used TMPDIR; a longer one (a
	// run can set many user.* attributes) means the directory is removed, not reused.
	maxTmpXattrList = 64 << 10
)

// errTmpNotReusable: a used TMPDIR failed a check and is removed instead.
var errTmpNotReusable = errors.New("private tmp not reusable")

type tmpDir struct {
	path     string
	dev, ino uint64
	// made: the directory's inode attributes as fledge made it, before any run had it.
	made inodeAttrs
}

// runTmps is the pool of emptied TMPDIRs, by parent directory and plugin name.
type runTmps struct {
	mu    sync.Mutex
	free  map[string][]tmpDir
	n     int
	close bool
}

func tmpKey(parent, name string) string { return parent + "\x00" + name }

// get returns a private TMPDIR for a run of name in parent: an emptied one of an earlier
// run when the pool has one that passes its checks, else a new one.
func (r *runTmps) get(parent, name string) (tmpDir, error) {
	key := tmpKey(parent, name)
	for {
		r.mu.Lock()
		l := r.free[key]
		if len(l) == 0 {
			r.mu.Unlock()
			break
		}
		d := l[len(l)-1]
		r.free[key] = l[:len(l)-1]
		r.n--
		r.mu.Unlock()
		if err := checkFreeTmp(d); err == nil {
			return d, nil
		}
		_ = os.RemoveAll(d.path)
	}
	p, err := os.MkdirTemp(parent, "fledge-tmp-"+sandbox.SafeName(name)+"-")
	if err != nil {
		return tmpDir{}, err
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(p)
		return tmpDir{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = os.Remove(p)
		return tmpDir{}, err
	}
	return tmpDir{path: p, dev: st.Dev, ino: st.Ino, made: readInodeAttrs(fd, &st)}, nil
}

// put empties d and keeps it for a later run of name, or removes it (pool full, closed,
// or d failed a check). The caller guarantees no process of the run that used d is left.
func (r *runTmps) put(parent, name string, d tmpDir) error {
	r.mu.Lock()
	full := r.close || r.n >= maxFreeTmps || len(r.free[tmpKey(parent, name)]) >= maxFreeTmpsPerKey
	r.mu.Unlock()
	if full {
		return os.RemoveAll(d.path)
	}
	if err := emptyTmp(d); err != nil {
		if rerr := os.RemoveAll(d.path); rerr != nil {
			return rerr
		}
		if errors.Is(err, errTmpNotReusable) {
			return nil // removed instead: nothing failed
		}
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := tmpKey(parent, name)
	if r.close || r.n >= maxFreeTmps || len(r.free[key]) >= maxFreeTmpsPerKey {
		return os.RemoveAll(d.path)
	}
	if r.free == nil {
		r.free = map[string][]tmpDir{}
	}
	r.free[key] = append(r.free[key], d)
	r.n++
	return nil
}

// closeAll removes every pooled directory; later puts remove theirs.
func (r *runTmps) closeAll() error {
	r.mu.Lock()
	r.close = true
	free := r.free
	r.free, r.n = nil, 0
	r.mu.Unlock()
	var errs []error
	for _, l := range free {
		for _, d := range l {
			if err := os.RemoveAll(d.path); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return joinErrs(errs)
}

// openTmp opens d without following a symlink and checks it is still the directory made
// for the pool: same inode, owned by fledge's effective user.
func openTmp(d tmpDir) (int, *unix.Stat_t, error) {
	fd, err := unix.Open(d.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("%w: %w", errTmpNotReusable, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%w: %w", errTmpNotReusable, err)
	}
	if st.Dev != d.dev || st.Ino != d.ino || st.Uid != uint32(os.Geteuid()) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("%w: %s changed identity or owner", errTmpNotReusable, d.path)
	}
	return fd, &st, nil
}

// emptyTmp removes everything a run left in and on its TMPDIR d.
func emptyTmp(d tmpDir) error {
	fd, _, err := openTmp(d)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			// Beneath d, which only fledge's own user reaches now: RemoveAll never follows
			// a symlink it meets.
			if err := os.RemoveAll(filepath.Join(d.path, n)); err != nil {
				return err
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := stripXattrs(fd); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("%w: chmod: %w", errTmpNotReusable, err)
	}
	return checkEmptyFD(fd, d)
}

// stripXattrs removes every extended attribute of the directory fd (a run may set user.*
// attributes and POSIX ACLs on a directory it owns).
func stripXattrs(fd int) error {
	sz, err := unix.Flistxattr(fd, nil)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: list xattrs: %w", errTmpNotReusable, err)
	}
	if sz == 0 {
		return nil
	}
	if sz > maxTmpXattrList {
		return fmt.Errorf("%w: %d bytes of xattr names", errTmpNotReusable, sz)
	}
	buf := make([]byte, sz)
	if sz, err = unix.Flistxattr(fd, buf); err != nil {
		return fmt.Errorf("%w: list xattrs: %w", errTmpNotReusable, err)
	}
	for _, name := range strings.Split(string(buf[:sz]), "\x00") {
		if name == "" {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("%w: remove xattr %q: %w", errTmpNotReusable, name, err)
		}
	}
	return nil
}

// checkFreeTmp checks a pooled directory right before it is handed out.
func checkFreeTmp(d tmpDir) error {
	fd, _, err := openTmp(d)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return checkEmptyFD(fd, d)
}

// checkEmptyFD: mode 0700, the inode attributes it was made with, no extended attribute,
// no entry.
func checkEmptyFD(fd int, d tmpDir) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: %w", errTmpNotReusable, err)
	}
	if st.Mode&0o7777 != 0o700 || st.Nlink != 2 {
		return fmt.Errorf("%w: %s mode %o links %d", errTmpNotReusable, d.path, st.Mode&0o7777, st.Nlink)
	}
	if a := readInodeAttrs(fd, &st); a != d.made {
		return fmt.Errorf("%w: %s inode attributes changed (%+v, made with %+v)", errTmpNotReusable, d.path, a, d.made)
	}
	if sz, err := unix.Flistxattr(fd, nil); err == nil && sz > 0 {
		return fmt.Errorf("%w: %s has extended attributes", errTmpNotReusable, d.path)
	}
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return fmt.Errorf("%w: %w", errTmpNotReusable, err)
	}
	var buf [1024]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err != nil {
			return fmt.Errorf("%w: %w", errTmpNotReusable, err)
		}
		if n == 0 {
			return nil
		}
		// ParseDirent leaves out "." and "..": any name is an entry the run left.
		if _, count, _ := unix.ParseDirent(buf[:n], 1, nil); count > 0 {
			return fmt.Errorf("%w: %s is not empty", errTmpNotReusable, d.path)
		}
	}
}

// Inode flags (FS_IOC_GETFLAGS, include/uapi/linux/fs.h) a filesystem changes by itself as
// a directory grows and shrinks (ext4 hash-indexes a directory past one block, for good;
// inline data moves out): storage layout, not something a run chose.
const (
	fsIndexFl      = 0x00001000
	fsHugeFileFl   = 0x00040000
	fsExtentFl     = 0x00080000
	fsEOFBlocksFl  = 0x00400000
	fsInlineDataFl = 0x10000000
	layoutFlags    = fsIndexFl | fsHugeFileFl | fsExtentFl | fsEOFBlocksFl | fsInlineDataFl

	// fsXflagHasAttr: XFS has an attribute fork, which it may keep after the last
	// attribute is removed (the attributes themselves are checked apart).
	fsXflagHasAttr = 0x80000000
)

// fsIocFSGetXattr is FS_IOC_FSGETXATTR, _IOR('X', 31, struct fsxattr) (28 bytes), which
// x/sys does not define: built from FS_IOC_GETFLAGS's direction bits, which differ by
// architecture.
const fsIocFSGetXattr = unix.FS_IOC_GETFLAGS&^0x1fffffff | 28<<16 | 'X'<<8 | 31

// fsxattr is struct fsxattr less fsx_nextents (a directory's extents follow its size) and
// the padding.
type fsxattr struct {
	xflags, extsize, projid, cowextsize uint32
}

// inodeAttrs is what a run can set on its TMPDIR's inode that emptying does not reset:
// the group, the inode flags and the fsxattr. A read that fails keeps its errno (a
// filesystem without the ioctl fails the same way each time; any other change shows).
type inodeAttrs struct {
	gid              uint32
	flags            uint32
	flagsErr, fsxErr unix.Errno
	fsx              fsxattr
}

func readInodeAttrs(fd int, st *unix.Stat_t) inodeAttrs {
	a := inodeAttrs{gid: st.Gid}
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	a.flags, a.flagsErr = flags&^layoutFlags, errnoOf(err)
	var raw [28]byte
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), fsIocFSGetXattr, uintptr(unsafe.Pointer(&raw[0]))); e != 0 {
		a.fsxErr = e
	} else {
		u := func(i int) uint32 { return binary.NativeEndian.Uint32(raw[4*i:]) }
		a.fsx = fsxattr{xflags: u(0) &^ fsXflagHasAttr, extsize: u(1), projid: u(3), cowextsize: u(4)}
	}
	return a
}

// errnoOf is err's errno, EIO for an error that is none, 0 for nil.
func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
