// SPDX-License-Identifier: MIT

package policy

import (
	"fmt"
	"io/fs"
	"slices"
)

// Device nodes are never granted: a block device (a disk, a loop device holding a disk
// image) gives every file on it, keys included, to whoever opens it, and a root fledge's
// plugin and commands keep uid 0. The only devices a confined process gets are the
// harmless character devices every process has (DeviceReadWrite, DeviceReadOnly), which
// the sandbox binds itself. A grant is checked by its name (nothing under /dev) and, where
// the caller can look, by what it is on disk (a node made with mknod anywhere else). A
// node that appears later inside a granted directory is the sandbox's to refuse: every
// mount of the Linux view is nodev.

// devDir is where the system keeps its device nodes; /dev/shm, a tmpfs of shared memory
// files and no device, is the one directory under it a policy path may name.
const (
	devDir = "/dev"
	devShm = "/dev/shm"
)

// HarmlessDevice reports whether path is one of the character devices every confined
// process gets (/dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom).
func HarmlessDevice(path string) bool {
	return slices.Contains(DeviceReadWrite, path) || slices.Contains(DeviceReadOnly, path)
}

// CheckDevicePath returns an ErrReadGrant error when path is, or may hold, a device node:
// /dev or a path under it (but the harmless devices and /dev/shm), or a path whose mode
// (what os.Stat says, following symlinks; 0 when unknown) is a device. path is absolute
// and clean.
func CheckDevicePath(path string, mode fs.FileMode) error {
	if HarmlessDevice(path) {
		return nil
	}
	if mode&fs.ModeDevice != 0 {
		kind := "character"
		if mode&fs.ModeCharDevice == 0 {
			kind = "block"
		}
		return fmt.Errorf("%w: %q is a device (a %s device node): a device is never granted", ErrReadGrant, path, kind)
	}
	if Within(path, devDir) && !Within(path, devShm) {
		return fmt.Errorf("%w: %q is %s or under it: a device is never granted", ErrReadGrant, path, devDir)
	}
	return nil
}
