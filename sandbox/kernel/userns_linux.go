// SPDX-License-Identifier: MIT

package kernel

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProbeView checks that the calling thread can build a view with its own /proc: a mount
// namespace of its own, a tmpfs in it and a proc of the thread's pid namespace. It is run
// by a probe process started inside a fresh user namespace, which the kernel may create
// and still deny these (an LSM such as AppArmor's unprivileged-userns restriction strips
// the namespace's capabilities). Everything it mounts vanishes with the probe process.
func ProbeView() error {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: unshare: %w", ErrView, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("%w: make / private: %w", ErrView, err)
	}
	if err := unix.Mount("fledge-probe", viewBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("%w: tmpfs: %w", ErrView, err)
	}
	if err := mountProc(viewBase + "/proc"); err != nil {
		return fmt.Errorf("%w: %w", ErrView, err)
	}
	return nil
}
