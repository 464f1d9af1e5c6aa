// SPDX-License-Identifier: MIT

package ui

import (
	"os"

	"golang.org/x/sys/unix"
)

// isCooked reports whether the terminal has canonical mode and echo on.
func isCooked(tty *os.File) (bool, error) {
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		return false, err
	}
	return tio.Lflag&unix.ICANON != 0 && tio.Lflag&unix.ECHO != 0, nil
}
