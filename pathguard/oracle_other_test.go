// SPDX-License-Identifier: MIT

//go:build unix && !linux

package pathguard

import "golang.org/x/sys/unix"

const oracleOpenFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
