// SPDX-License-Identifier: MIT

package linux

import (
	"golang.org/x/sys/unix"
)

// IPCNamespace values of Report.IPCNamespace.
const (
	IPCPerRun = "per-run"
	IPCNone   = "none"
)

// canUnshareIPC tries unshare(CLONE_NEWIPC) on a throwaway thread (root: CAP_SYS_ADMIN).
// Without it a command shares SysV shared memory, message queues, semaphores and POSIX
// message queues with the host user, and what it makes outlives the run.
func canUnshareIPC() bool {
	ok := false
	onDiscardedThread(func() { ok = unix.Unshare(unix.CLONE_NEWIPC) == nil })
	return ok
}
