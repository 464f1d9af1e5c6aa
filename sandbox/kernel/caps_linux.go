// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DropExecCaps makes sure the program about to be exec'd gets no capabilities, even when
// fledge runs as root (CI, containers). Landlock confines the filesystem, but a root command
// keeping CAP_SYS_BOOT, CAP_SYS_MODULE, CAP_NET_ADMIN, CAP_MKNOD or CAP_SYS_TIME could reboot
// the machine, load a module, reconfigure the host network or mknod a raw disk in the
// project. For uid 0, execve computes permitted = inheritable | bounding (| ambient), so
// emptying the bounding set, the inheritable set and the ambient set on the exec'ing thread
// leaves the exec'd program with nothing. The thread keeps its own effective set until
// exec (fork still needs CAP_SYS_ADMIN for a new network namespace). All three are
// per-thread: the host's other threads keep theirs.
//
// Without CAP_SETPCAP (an unprivileged fledge) the bounding set cannot be changed, but then
// there is nothing to drop: an unprivileged exec gains no capabilities (no_new_privs also
// disables file capabilities).
func DropExecCaps() error { return dropExecCaps(true) }

// DropExecCapsBoundingDone is DropExecCaps on a thread whose bounding set DropBoundingCaps
// already emptied (and which has not regained any since: a bounding capability, once
// dropped, cannot come back): the ambient and inheritable sets only.
func DropExecCapsBoundingDone() error { return dropExecCaps(false) }

func dropExecCaps(bounding bool) error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if bounding && data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		if err := DropBoundingCaps(); err != nil {
			return err
		}
	}
	if data[0].Inheritable != 0 || data[1].Inheritable != 0 {
		data[0].Inheritable, data[1].Inheritable = 0, 0
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
	}
	return nil
}

// DropBoundingCaps empties the calling thread's capability bounding set (it needs
// CAP_SETPCAP). The thread keeps its effective set, so it can still mount and join
// namespaces; only what a later execve could gain is gone. A cap already dropped is only
// read (PR_CAPBSET_READ), not dropped again: each drop replaces the thread's credentials,
// a few microseconds apiece, and a launch thread made ahead of its run (spare_linux.go in
// the sandbox) has dropped them all before DropExecCaps runs.
func DropBoundingCaps() error { return DropBoundingCapsExcept(0) }

// DropBoundingCapsExcept is DropBoundingCaps keeping the capabilities in keep (a mask,
// bit n for capability n).
func DropBoundingCapsExcept(keep uint64) error {
	last := lastCapOnce()
	for c := 0; c <= last; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop bounding cap %d: %w", c, err)
		}
	}
	return nil
}

// lastCapOnce is lastCap, read once: the kernel's highest capability does not change
// while it runs.
var lastCapOnce = sync.OnceValue(lastCap)

// lastCap is the highest capability number the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	// Unreadable (e.g. first asked on a thread already confined, whose answer is then kept
	// for the process): every number a capability can have; the drop loop skips the ones
	// this kernel does not know (EINVAL), so none it knows is left in the bounding set.
	return 63
}
