// SPDX-License-Identifier: MIT

//go:build unix

package main

import (
	"os"
	"syscall"
)

// treeMaxRSS is the largest resident set of the process or any child it waited for (KiB
// on Linux; 0 when unknown).
func treeMaxRSS(ps *os.ProcessState) int64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0
	}
	return int64(ru.Maxrss) // int32 on 32-bit systems
}
