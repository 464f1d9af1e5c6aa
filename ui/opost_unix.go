// SPDX-License-Identifier: MIT

//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package ui

import "golang.org/x/sys/unix"

// keepOutputProcessing turns output post-processing (\n -> \r\n) back on after MakeRaw.
// The form library only maps newlines itself when it put the terminal in raw mode, and it
// did not (fledge did, to own the input): without this every line of the form starts
// where the previous one ended.
func keepOutputProcessing(fd int) error {
	t, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return err
	}
	t.Oflag |= unix.OPOST | unix.ONLCR
	return unix.IoctlSetTermios(fd, ioctlSetTermios, t)
}
