// SPDX-License-Identifier: MIT

//go:build unix

package wasm

import (
	"os"

	"golang.org/x/sys/unix"
)

// dupFile returns a close-on-exec duplicate of f (same open file, own descriptor).
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
