// SPDX-License-Identifier: MIT

//go:build unix

package stub

import (
	"os"
	"strconv"
	"syscall"
)

// cloexecFromDir marks every fd listed in dir (/proc/self/fd, /dev/fd) >= first CLOEXEC.
// The directory's own fd is marked too, which is harmless.
func cloexecFromDir(dir string, first int) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < first {
			continue
		}
		if _, err := fcntl(fd, syscall.F_SETFD, syscall.FD_CLOEXEC); err != nil && err != syscall.EBADF {
			return err
		}
	}
	return nil
}
