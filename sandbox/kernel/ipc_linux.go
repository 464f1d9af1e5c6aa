// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// IPC: every run has an IPC namespace of its own (the launcher unshares CLONE_NEWIPC, or
// the stub is cloned with it), so SysV shared memory, message queues and semaphores of the
// host and of other runs do not exist for it, and what it makes dies with its last process
// (the namespace goes with it). POSIX message queues live in the same namespace; the
// mqueue filesystem that shows them is the namespace of whoever mounted it, so a grant
// that makes the host's /dev/mqueue visible in the view would show the host's queues:
// freshMqueue mounts the run's own over it.

// freshMqueue mounts the calling thread's IPC namespace's mqueue filesystem at
// prefix/dev/mqueue when a grant made that directory exist in the view.
func freshMqueue(prefix string) error {
	dst := prefix + "/dev/mqueue"
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("/dev/mqueue: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	if err := unix.Mount("mqueue", dst, "mqueue", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("own /dev/mqueue: %w", err)
	}
	return nil
}
