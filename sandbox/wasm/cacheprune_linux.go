// SPDX-License-Identifier: MIT

package wasm

import (
	"os"
	"syscall"
	"time"
)

// accessTime is fi's access time.
func accessTime(fi os.FileInfo) (time.Time, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(int64(st.Atim.Sec), int64(st.Atim.Nsec)), true // int32 fields on 386
}
