// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"os"
	"sort"
	"syscall"
	"time"
)

// inPlaceFloor is fsyncFloor's -in-place: the lines written in place into a preallocated
// file (zeros written and synced once) and each decision synced with fdatasync.
func inPlaceFloor(n int, f, head *os.File, decision, outcome, slot []byte) error {
	times := make([]time.Duration, 0, n)
	size := int64(n) * int64(len(decision)+len(outcome))
	// Zeros written, not fallocated: an fallocated extent is "unwritten", and the first
	// write into it is a metadata change that fdatasync must commit as fsync would.
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	var at int64
	for i := range n {
		start := time.Now()
		if _, err := f.WriteAt(decision, at); err != nil {
			return err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		if _, err := head.WriteAt(slot, int64(i%2)*512); err != nil {
			return err
		}
		if _, err := f.WriteAt(outcome, at+int64(len(decision))); err != nil {
			return err
		}
		at += int64(len(decision) + len(outcome))
		times = append(times, time.Since(start))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("median_ns=%d p90_ns=%d n=%d\n", times[len(times)/2].Nanoseconds(), times[len(times)*9/10].Nanoseconds(), n)
	return nil
}
