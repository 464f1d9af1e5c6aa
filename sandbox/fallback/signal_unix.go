// SPDX-License-Identifier: MIT

//go:build unix

package fallback

import (
	"syscall"

	"golang.org/x/sys/unix"
)

func signalName(s syscall.Signal) string { return unix.SignalName(s) }
