package linux

import (
	"runtime"

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
	res := make(chan bool, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		res <- unix.Unshare(unix.CLONE_NEWIPC) == nil
	}()
	return <-res
}
