// SPDX-License-Identifier: MIT

//go:build unix

package wasm_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system, every thread) this process has used: a
// figure a loaded machine distorts far less than wall-clock time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
