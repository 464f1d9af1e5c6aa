// SPDX-License-Identifier: MIT

package filestamp

import (
	"os"
	"syscall"
)

func stampOf(fi os.FileInfo) (Stamp, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Stamp{}, false
	}
	return Stamp{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: syscall.TimespecToNsec(st.Mtimespec), ctime: syscall.TimespecToNsec(st.Ctimespec),
	}, true
}
