// SPDX-License-Identifier: MIT

//go:build unix

package pathguard

import (
	"fmt"
	"os"
	"syscall"
)

// statDevIno reads the handle's identity with fstat (O_PATH handles allow it on Linux).
func statDevIno(f *os.File) (dev, ino uint64, isDir bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false, fmt.Errorf("fstat %s: no device and inode", f.Name())
	}
	return uint64(st.Dev), uint64(st.Ino), fi.IsDir(), nil
}

// Verify checks that f is still the directory (dev, ino) that Resolve returned. The host
// calls it right before handing the fd to the sandbox (protocolhost's exec path): what runs
// must run in exactly the directory that was checked. The child then fchdir()s to that very
// fd, so nothing is re-resolved by path after this check.
func Verify(f *os.File, dev, ino uint64) error {
	if f == nil {
		return refuse(ReasonInvalid, "", "no directory handle", ErrMismatch)
	}
	gotDev, gotIno, isDir, err := statDevIno(f)
	if err != nil {
		return refuse(ReasonInvalid, f.Name(), "", err)
	}
	if !isDir {
		return refuse(ReasonNotDirectory, f.Name(), ErrMismatch.Error(), ErrMismatch)
	}
	if gotDev != dev || gotIno != ino {
		return refuse(ReasonInvalid, f.Name(),
			fmt.Sprintf("%v: want dev %d ino %d, handle is dev %d ino %d", ErrMismatch, dev, ino, gotDev, gotIno), ErrMismatch)
	}
	return nil
}

// Verify checks the handle against the identity recorded when it was resolved.
func (d *Dir) Verify() error { return Verify(d.File, d.Dev, d.Ino) }
