// SPDX-License-Identifier: MIT

//go:build unix

package protocolhost

import "syscall"

// oNoFollow refuses to open a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW
