// SPDX-License-Identifier: MIT

package kernel

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// No device node opens in a view but the harmless character devices every command gets.
// A granted directory can hold one: a block device node root made with mknod (or a disk
// image's loop device) in a project or a read grant, or /dev itself in a policy path.
// Opened by a root fledge's command, which keeps uid 0, it reads a whole disk, keys
// included, whatever the files on it say. Landlock grants a path's reads whatever the
// path is, so the view decides: every mount in it is nodev (the kernel refuses to open a
// device node on such a mount, EACCES), except a mount of one of these devices themselves,
// bound file by file.

// harmlessDevices are the character devices a view may show as devices, with the numbers
// the kernel gives them everywhere: a node of that name with another number (a disk) is
// mounted nodev like any other file.
var harmlessDevices = map[string]uint64{
	"/dev/null":    unix.Mkdev(1, 3),
	"/dev/zero":    unix.Mkdev(1, 5),
	"/dev/full":    unix.Mkdev(1, 7),
	"/dev/random":  unix.Mkdev(1, 8),
	"/dev/urandom": unix.Mkdev(1, 9),
}

// harmlessDevice reports whether p, as fi describes it, is one of the character devices a
// view shows as a device (/dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom).
func harmlessDevice(p string, fi os.FileInfo) bool {
	want, ok := harmlessDevices[p]
	if !ok || fi == nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Rdev) == want
}

// noDevices makes the mount at dst (a path; tree -1) or the detached tree (dst "") and
// every mount beneath it nodev.
func noDevices(tree int, dst string) error {
	flags := unix.AT_RECURSIVE
	if tree >= 0 {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.MountSetattr(tree, dst, uint(flags), &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("nodev: %w", err)
	}
	return nil
}
