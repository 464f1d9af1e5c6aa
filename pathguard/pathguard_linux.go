// SPDX-License-Identifier: MIT

package pathguard

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxEAGAIN bounds openat2 retries: RESOLVE_BENEATH returns EAGAIN when a rename or mount
// raced with a ".." lookup, and an attacker renaming in a loop must not spin us forever.
const maxEAGAIN = 128

// rootSys is the root's O_PATH directory fd: every lookup starts from it, never from a path.
type rootSys struct{ fd int }

// guardSys: fallback switches Linux from openat2 to os.Root, set once openat2 turns out to
// be missing or forbidden, and by tests to exercise that path directly.
type guardSys struct{ fallback atomic.Bool }

func openRootSys(rt *root) error {
	fd, err := unix.Open(rt.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: rt.path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "fstat", Path: rt.path, Err: err}
	}
	// os.Root (fallback and diagnostics) has to be opened by path again; make sure both
	// handles name the same directory, or the fallback would guard a different tree.
	r, err := os.OpenRoot(rt.path)
	if err != nil {
		unix.Close(fd)
		return err
	}
	fi, err := r.Stat(".")
	if err == nil {
		st2, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || uint64(st2.Dev) != uint64(st.Dev) || st2.Ino != st.Ino {
			err = fmt.Errorf("root changed while it was being opened")
		}
	}
	if err != nil {
		r.Close()
		unix.Close(fd)
		return err
	}
	rt.rootSys = rootSys{fd: fd}
	rt.r = r
	rt.dev, rt.ino = uint64(st.Dev), st.Ino
	return nil
}

func closeRootSys(rt *root) error {
	if rt.fd <= 0 {
		return nil
	}
	err := unix.Close(rt.fd)
	rt.fd = -1
	return err
}

// openBeneath opens rel beneath rt: openat2 where the kernel allows it, os.Root otherwise.
func (g *Guard) openBeneath(rt *root, rel string) (*os.File, error) {
	if !g.fallback.Load() {
		how := unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		}
		for range maxEAGAIN {
			fd, err := unix.Openat2(rt.fd, rel, &how)
			switch {
			case err == nil:
				return os.NewFile(uintptr(fd), rt.path+"/"+rel), nil
			case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
				// Old kernel, or a seccomp filter (some container runtimes) that forbids it.
				g.fallback.Store(true)
				return openInRoot(rt, rel)
			default:
				return nil, err
			}
		}
		return nil, fmt.Errorf("%w: openat2 returned EAGAIN %d times", ErrBusy, maxEAGAIN)
	}
	return openInRoot(rt, rel)
}

// openInRoot is the os.Root path: the runtime walks rel component by component from the
// root fd with O_NOFOLLOW and refuses ".." above the root and absolute symlinks.
func openInRoot(rt *root, rel string) (*os.File, error) {
	return rt.r.OpenFile(rel, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// onProcfs reports whether dir (inside the root) lives on procfs, where links are magic.
func onProcfs(rt *root, dir string) bool {
	f, err := rt.r.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return false
	}
	return sfs.Type == unix.PROC_SUPER_MAGIC
}

// handlePath asks the kernel for the handle's current path.
func handlePath(f *os.File) (string, bool) {
	var p string
	var rerr error
	c, err := f.SyscallConn()
	if err != nil {
		return "", false
	}
	err = c.Control(func(fd uintptr) {
		p, rerr = os.Readlink("/proc/self/fd/" + strconv.Itoa(int(fd)))
	})
	if err != nil || rerr != nil || len(p) == 0 || p[0] != '/' {
		return "", false
	}
	return p, true
}
