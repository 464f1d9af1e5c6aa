// SPDX-License-Identifier: MIT

//go:build !unix

package tools

import "os"

// inodeOf has no inode number to give on this OS.
func inodeOf(os.FileInfo) (uint64, bool) { return 0, false }
