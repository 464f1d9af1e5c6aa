// SPDX-License-Identifier: MIT

//go:build !unix

package main

import "os"

// treeMaxRSS is unknown on this OS (0): it reports no peak resident set of a process tree.
func treeMaxRSS(*os.ProcessState) int64 { return 0 }
