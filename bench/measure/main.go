// SPDX-License-Identifier: MIT

// Command measure runs one command and prints how long it took and how much memory it held:
//
//	measure [-o FILE] [-e FILE] [-timeout DUR] -- CMD [ARGS...]
//	wall_ns=123 hwm_kib=4567 tree_maxrss_kib=4600 user_ns=800 sys_ns=900 exit=0
//
// hwm_kib is the command's own peak RSS (VmHWM from /proc, sampled until it exits: the
// figure only grows, so the last sample is within one interval of the true peak).
// tree_maxrss_kib is wait4's ru_maxrss: the largest peak of the command and every
// descendant it waited for (a plugin counts too), an upper bound on the command's own.
// user_ns and sys_ns are the CPU time of the same tree (wait4's rusage), which moves less
// with the load of other work on the machine than wall_ns does.
// Stdin is /dev/null; stdout and stderr go to /dev/null unless -o/-e name a file.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

func main() {
	out := flag.String("o", os.DevNull, "file for the command's stdout")
	errOut := flag.String("e", os.DevNull, "file for the command's stderr")
	timeout := flag.Duration("timeout", 5*time.Minute, "kill the command after this long")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: measure [-o FILE] [-e FILE] [-timeout DUR] -- CMD [ARGS...]")
		os.Exit(2)
	}
	if err := run(*out, *errOut, *timeout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(1)
	}
}

func openOut(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
}

func run(outPath, errPath string, timeout time.Duration, argv []string) error {
	stdout, err := openOut(outPath)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := openOut(errPath)
	if err != nil {
		return err
	}
	defer stderr.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr // stdin nil: /dev/null
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	hwm := make(chan int64, 1)
	go func() { hwm <- sampleHWM(cmd.Process.Pid, done) }()
	waitErr := cmd.Wait()
	wall := time.Since(start)
	close(done)
	peak := <-hwm
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return waitErr
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: killed after %s", argv[0], timeout)
	}
	tree := treeMaxRSS(cmd.ProcessState)
	fmt.Printf("wall_ns=%d hwm_kib=%d tree_maxrss_kib=%d user_ns=%d sys_ns=%d exit=%d\n", wall.Nanoseconds(), peak, tree,
		cmd.ProcessState.UserTime().Nanoseconds(), cmd.ProcessState.SystemTime().Nanoseconds(), cmd.ProcessState.ExitCode())
	return nil
}

// sampleHWM reads VmHWM of pid every few milliseconds until done, returning the last value.
func sampleHWM(pid int, done <-chan struct{}) int64 {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	var last int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, ok := readHWM(path); ok && v > last {
			last = v
		}
		select {
		case <-done:
			return last
		case <-tick.C:
		}
	}
}

func readHWM(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			v, err := strconv.ParseInt(string(f[0]), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
