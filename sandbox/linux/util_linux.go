// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func joinErrs(errs []error) error { return errors.Join(errs...) }

// pgroupMembers lists the processes of process group pgid (for the Killed count when only
// a process group is available). Best effort: it scans /proc.
func pgroupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the ")" of comm: state ppid pgrp ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// onDiscardedThread runs fn on a locked OS thread that is not the main one and that dies
// afterwards (the goroutine exits still locked, so the runtime terminates the thread): for
// per-thread state a launch leaves behind (namespaces, Landlock, a private fs_struct). The
// main thread is never terminated, so holding it forces the work onto another thread.
// It returns once fn has.
func onDiscardedThread(fn func()) {
	done := make(chan struct{})
	var run func()
	run = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			defer runtime.UnlockOSThread()
			inner := make(chan struct{})
			go func() { run(); close(inner) }()
			<-inner
			return
		}
		fn() // never unlocked
	}
	go func() { defer close(done); run() }()
	<-done
}
