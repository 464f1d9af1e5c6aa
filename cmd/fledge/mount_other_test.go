// SPDX-License-Identifier: MIT

//go:build !linux

package main

import "github.com/rogpeppe/go-internal/testscript"

// Scripts that mount are guarded by [linux]; elsewhere these commands only say so.

func cmdTmpfs(ts *testscript.TestScript, neg bool, args []string) {
	ts.Fatalf("tmpfs: Linux only")
}

func cmdFillfs(ts *testscript.TestScript, neg bool, args []string) {
	ts.Fatalf("fillfs: Linux only")
}

func cmdLoopdev(ts *testscript.TestScript, neg bool, args []string) {
	ts.Fatalf("loopdev: Linux only")
}
