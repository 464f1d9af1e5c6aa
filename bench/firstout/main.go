// SPDX-License-Identifier: MIT

// Command firstout times how long a command takes from its process start to the first byte
// on its stdout, over N runs:
//
//	firstout [-n N] [-timeout DUR] [-e FILE] -- CMD [ARGS...]
//	n=20 median_ns=9100000 min_ns=8700000 max_ns=12000000 cpu_ns=7200000 exit=0
//
// The clock starts right before the fork and stops when the first read of the command's
// stdout returns data; the rest of its output is then drained and the command waited for.
// One warm-up run comes first and is not counted (it pays for the page cache). cpu_ns is the
// median user+sys time of a whole run (wait4's rusage: the command and every descendant it
// waited for), which moves less with the load of other work on the machine than the wall
// figures. Stdin is /dev/null; stderr goes to /dev/null unless -e names a file. A run that
// prints nothing, exits non-zero or outlives -timeout fails the whole measurement.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"
)

func main() {
	n := flag.Int("n", 20, "counted runs (after one warm-up)")
	timeout := flag.Duration("timeout", time.Minute, "kill a run after this long")
	errOut := flag.String("e", os.DevNull, "file for the command's stderr")
	flag.Parse()
	if flag.NArg() == 0 || *n <= 0 {
		fmt.Fprintln(os.Stderr, "usage: firstout [-n N] [-timeout DUR] [-e FILE] -- CMD [ARGS...]")
		os.Exit(2)
	}
	if err := measure(*n, *timeout, *errOut, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "firstout:", err)
		os.Exit(1)
	}
}

func measure(n int, timeout time.Duration, errPath string, argv []string) error {
	stderr, err := os.OpenFile(errPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close()
	if _, _, err := once(timeout, stderr, argv); err != nil { // warm-up
		return err
	}
	firsts := make([]int64, 0, n)
	cpus := make([]int64, 0, n)
	for range n {
		first, cpu, err := once(timeout, stderr, argv)
		if err != nil {
			return err
		}
		firsts = append(firsts, first.Nanoseconds())
		cpus = append(cpus, cpu.Nanoseconds())
	}
	slices.Sort(firsts)
	slices.Sort(cpus)
	fmt.Printf("n=%d median_ns=%d min_ns=%d max_ns=%d cpu_ns=%d exit=0\n",
		n, firsts[n/2], firsts[0], firsts[n-1], cpus[n/2])
	return nil
}

// once runs argv, returning the time to its first stdout byte and the CPU time of the run.
func once(timeout time.Duration, stderr *os.File, argv []string) (time.Duration, time.Duration, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = w, stderr // stdin nil: /dev/null
	start := time.Now()
	deadline := start.Add(timeout)
	// A pipe from os.Pipe is pollable: the deadline bounds every read, also when a
	// descendant that outlived the command still holds the write end.
	if err := r.SetReadDeadline(deadline); err != nil {
		w.Close()
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return 0, 0, err
	}
	w.Close()
	kill := time.AfterFunc(timeout, func() { cmd.Process.Kill() })
	defer kill.Stop()

	var b [4096]byte
	got, readErr := r.Read(b[:])
	first := time.Since(start)
	if readErr == nil {
		_, readErr = io.Copy(io.Discard, r)
	}
	waitErr := cmd.Wait()
	switch {
	case errors.Is(readErr, os.ErrDeadlineExceeded) || time.Now().After(deadline):
		return 0, 0, fmt.Errorf("%s: killed after %s", argv[0], timeout)
	case got == 0:
		return 0, 0, fmt.Errorf("%s: printed nothing (%v)", argv[0], waitErr)
	case waitErr != nil:
		return 0, 0, fmt.Errorf("%s: %w", argv[0], waitErr)
	case readErr != nil && !errors.Is(readErr, io.EOF):
		return 0, 0, readErr
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return first, cpu, nil
}
