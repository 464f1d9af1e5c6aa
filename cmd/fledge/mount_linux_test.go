// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

// cmdTmpfs mounts a tmpfs: tmpfs DIR SIZE (e.g. 64k), mode 0700 as fledge's state directory
// must be; it is unmounted when the script ends. Needs root ([root]).
func cmdTmpfs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: tmpfs DIR SIZE")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o700))
	ts.Check(unix.Mount("fledge-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+args[1]+",mode=0700"))
	ts.Defer(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// cmdFillfs fills the filesystem holding FILE by writing FILE until ENOSPC: fillfs FILE.
func cmdFillfs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fillfs FILE")
	}
	f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	ts.Check(err)
	defer f.Close()
	chunk := bytes.Repeat([]byte("f"), 512)
	for range 1 << 20 { // 512 MiB at most: the filesystems this is for are tiny
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				ts.Fatalf("fillfs: %v", err)
			}
			return
		}
	}
	ts.Fatalf("fillfs: %s never filled up", args[0])
}

// cmdLoopdev attaches a disk image to a free loop device with losetup (the real tool) and
// detaches it when the script ends: loopdev IMAGE VAR sets $VAR to the device's path and
// $VAR_MAJ, $VAR_MIN to its numbers. Needs root ([root]) and losetup ([exec:losetup]).
func cmdLoopdev(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: loopdev IMAGE VAR")
	}
	var stderr bytes.Buffer
	cmd := exec.Command("losetup", "--find", "--show", ts.MkAbs(args[0]))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		ts.Fatalf("losetup: %v: %s", err, stderr.String())
	}
	dev := strings.TrimSpace(string(out))
	ts.Defer(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	var st unix.Stat_t
	ts.Check(unix.Stat(dev, &st))
	ts.Setenv(args[1], dev)
	ts.Setenv(args[1]+"_MAJ", strconv.FormatUint(uint64(unix.Major(st.Rdev)), 10))
	ts.Setenv(args[1]+"_MIN", strconv.FormatUint(uint64(unix.Minor(st.Rdev)), 10))
}
