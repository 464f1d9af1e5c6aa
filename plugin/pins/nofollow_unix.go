// SPDX-License-Identifier: MIT

//go:build unix

package pins

import "syscall"

// oNoFollow refuses a pin file that is a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW
