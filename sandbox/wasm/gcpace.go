// SPDX-License-Identifier: MIT

package wasm

import (
	"runtime/debug"
	"sync"
)

// A start of a Go-built module in a new fledge process allocates about 9 MB of Go heap (the
// module's bytes, the merged bytes wazero keeps, the decoded module) where the collector's
// first goal is 4 MB: two collections ran inside every start, 2.7 ms of CPU in all, though
// nearly all of it stays live. While any start is loading its module, the collector is
// paced at startGCPercent instead (its first goal then 16 MB): the heap it would have
// collected is the start's own, and the one collection left runs once the start is done.
// A limit set with GOMEMLIMIT still holds, and GOGC=off stays off.
const startGCPercent = 400

var gcPace struct {
	mu    sync.Mutex
	holds int
	saved int
}

// paceGCForStart raises the collector's percent for a start's loading, until the returned
// function is called (once); concurrent starts share one raise.
func paceGCForStart() (done func()) {
	gcPace.mu.Lock()
	if gcPace.holds == 0 {
		gcPace.saved = debug.SetGCPercent(startGCPercent)
		if gcPace.saved < 0 || gcPace.saved >= startGCPercent {
			debug.SetGCPercent(gcPace.saved) // off, or already paced more loosely: kept
		}
	}
	gcPace.holds++
	gcPace.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			gcPace.mu.Lock()
			defer gcPace.mu.Unlock()
			if gcPace.holds--; gcPace.holds == 0 && gcPace.saved >= 0 && gcPace.saved < startGCPercent {
				debug.SetGCPercent(gcPace.saved)
			}
		})
	}
}
