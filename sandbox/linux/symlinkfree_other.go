// SPDX-License-Identifier: MIT

//go:build !linux

package linux

// symlinkFree cannot tell without openat2: callers resolve every path.
func symlinkFree(string) bool { return false }
