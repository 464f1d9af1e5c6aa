// SPDX-License-Identifier: MIT

package wasm

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	experimentalsys "github.com/fledgehq/fledge/third_party/wazero/experimental/sys"
	"github.com/fledgehq/fledge/third_party/wazero/sys"
)

// rootFS is a WASI filesystem backed by an os.Root. wazero's own DirFS joins guest paths to
// a host directory and lets the OS follow symlinks, so a link planted in the plugin's data
// dir (or present in the project) would lead anywhere on the host. os.Root resolves every
// path, symlinks included, inside its directory: that is the containment, not a path check
// of ours. readOnly refuses every change (the project is preopened read-only).
type rootFS struct {
	experimentalsys.UnimplementedFS
	root     *os.Root
	readOnly bool
}

func newRootFS(dir string, readOnly bool) (*rootFS, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &rootFS{root: r, readOnly: readOnly}, nil
}

func (r *rootFS) close() { _ = r.root.Close() }

// rel turns a guest path (relative to the preopen, sometimes with a leading slash) into a
// path for os.Root.
func rel(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

func errno(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, io.EOF) {
		return 0
	}
	// os.Root reports a path that would leave the root as a plain error: to the guest it
	// simply does not exist there.
	if strings.Contains(err.Error(), "path escapes from parent") {
		return experimentalsys.ENOENT
	}
	return experimentalsys.UnwrapOSError(err)
}

func (r *rootFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	var of int
	switch flag & 3 {
	case experimentalsys.O_RDWR:
		of = os.O_RDWR
	case experimentalsys.O_WRONLY:
		of = os.O_WRONLY
	default:
		of = os.O_RDONLY
	}
	writes := of != os.O_RDONLY || flag&(experimentalsys.O_CREAT|experimentalsys.O_TRUNC|experimentalsys.O_APPEND) != 0
	if writes && r.readOnly {
		return nil, experimentalsys.EROFS
	}
	if flag&experimentalsys.O_APPEND != 0 {
		of |= os.O_APPEND
	}
	if flag&experimentalsys.O_CREAT != 0 {
		of |= os.O_CREATE
	}
	if flag&experimentalsys.O_EXCL != 0 {
		of |= os.O_EXCL
	}
	if flag&experimentalsys.O_TRUNC != 0 {
		of |= os.O_TRUNC
	}
	p := rel(path)
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		if fi, err := r.root.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	// O_NONBLOCK: opening a FIFO blocks until its other end is opened, inside fledge's own
	// process, where no deadline or signal reaches a blocked open(2). A plugin's exec can
	// mkfifo in the data dir, and a project can hold one. With O_NONBLOCK the open returns
	// at once (ENXIO for a FIFO's write end without a reader), and the file's type is then
	// checked on the opened descriptor, so nothing can be swapped in between.
	f, err := r.root.OpenFile(p, of|syscall.O_NONBLOCK, perm&0o777)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			return nil, experimentalsys.EACCES
		}
		return nil, errno(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, errno(err)
	}
	if flag&experimentalsys.O_DIRECTORY != 0 && !fi.IsDir() {
		f.Close()
		return nil, experimentalsys.ENOTDIR
	}
	// Only regular files and directories: a FIFO, socket or device could block a later
	// read or write in the host (or drive hardware), and no plugin's files need one.
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		f.Close()
		return nil, experimentalsys.EACCES
	}
	return &rootFile{f: f, append: flag&experimentalsys.O_APPEND != 0, readOnly: r.readOnly}, 0
}

func (r *rootFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Lstat(rel(path))
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

func (r *rootFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	fi, err := r.root.Stat(rel(path))
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

func (r *rootFS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return errno(r.root.Mkdir(rel(path), perm&0o777))
}

func (r *rootFS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return errno(r.root.Chmod(rel(path), perm&0o777))
}

func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return errno(r.root.Rename(rel(from), rel(to)))
}

func (r *rootFS) Rmdir(path string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	fi, err := r.root.Lstat(rel(path))
	if err != nil {
		return errno(err)
	}
	if !fi.IsDir() {
		return experimentalsys.ENOTDIR
	}
	return errno(r.root.Remove(rel(path)))
}

func (r *rootFS) Unlink(path string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	fi, err := r.root.Lstat(rel(path))
	if err != nil {
		return errno(err)
	}
	if fi.IsDir() {
		return experimentalsys.EISDIR
	}
	return errno(r.root.Remove(rel(path)))
}

// Link and Symlink are refused: a link in the data dir is a trap for whoever later walks it
// outside the runtime (the host, a native tool), and no plugin needs one.
func (r *rootFS) Link(_, _ string) experimentalsys.Errno    { return experimentalsys.EPERM }
func (r *rootFS) Symlink(_, _ string) experimentalsys.Errno { return experimentalsys.EPERM }

func (r *rootFS) Readlink(path string) (string, experimentalsys.Errno) {
	s, err := r.root.Readlink(rel(path))
	if err != nil {
		return "", errno(err)
	}
	return s, 0
}

func (r *rootFS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	if atim == experimentalsys.UTIME_OMIT || mtim == experimentalsys.UTIME_OMIT {
		return experimentalsys.ENOSYS
	}
	return errno(r.root.Chtimes(rel(path), time.Unix(0, atim), time.Unix(0, mtim)))
}

// rootFile is one open file or directory of a rootFS.
type rootFile struct {
	experimentalsys.UnimplementedFile
	f        *os.File
	append   bool
	readOnly bool
}

func (f *rootFile) st() (sys.Stat_t, experimentalsys.Errno) {
	fi, err := f.f.Stat()
	if err != nil {
		return sys.Stat_t{}, errno(err)
	}
	return sys.NewStat_t(fi), 0
}

func (f *rootFile) Dev() (uint64, experimentalsys.Errno) {
	st, e := f.st()
	return st.Dev, e
}

func (f *rootFile) Ino() (sys.Inode, experimentalsys.Errno) {
	st, e := f.st()
	return st.Ino, e
}

func (f *rootFile) IsDir() (bool, experimentalsys.Errno) {
	st, e := f.st()
	return st.Mode.IsDir(), e
}

func (f *rootFile) IsAppend() bool { return f.append }

func (f *rootFile) SetAppend(enable bool) experimentalsys.Errno {
	if enable != f.append {
		// os.File cannot change O_APPEND after open; no WASI program we host needs it.
		return experimentalsys.ENOSYS
	}
	return 0
}

func (f *rootFile) Stat() (sys.Stat_t, experimentalsys.Errno) { return f.st() }

func (f *rootFile) Read(buf []byte) (int, experimentalsys.Errno) {
	n, err := f.f.Read(buf)
	return n, errno(err)
}

func (f *rootFile) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	n, err := f.f.ReadAt(buf, off)
	return n, errno(err)
}

// seekOffset is int64 under another name: wazero's File.Seek returns an Errno, not an
// error, which go vet's io.Seeker signature check would otherwise report.
type seekOffset = int64

func (f *rootFile) Seek(offset seekOffset, whence int) (int64, experimentalsys.Errno) {
	n, err := f.f.Seek(offset, whence)
	return n, errno(err)
}

func (f *rootFile) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	ents, err := f.f.ReadDir(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	out := make([]experimentalsys.Dirent, 0, len(ents))
	for _, e := range ents {
		d := experimentalsys.Dirent{Name: e.Name(), Type: e.Type()}
		if fi, err := e.Info(); err == nil {
			d.Ino = sys.NewStat_t(fi).Ino
		}
		out = append(out, d)
	}
	return out, 0
}

func (f *rootFile) Write(buf []byte) (int, experimentalsys.Errno) {
	if f.readOnly {
		return 0, experimentalsys.EBADF
	}
	n, err := f.f.Write(buf)
	return n, errno(err)
}

func (f *rootFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if f.readOnly {
		return 0, experimentalsys.EBADF
	}
	n, err := f.f.WriteAt(buf, off)
	return n, errno(err)
}

func (f *rootFile) Truncate(size int64) experimentalsys.Errno {
	if f.readOnly {
		return experimentalsys.EBADF
	}
	return errno(f.f.Truncate(size))
}

func (f *rootFile) Sync() experimentalsys.Errno     { return errno(f.f.Sync()) }
func (f *rootFile) Datasync() experimentalsys.Errno { return errno(f.f.Sync()) }
func (f *rootFile) Close() experimentalsys.Errno    { return errno(f.f.Close()) }
