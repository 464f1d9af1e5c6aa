// SPDX-License-Identifier: MIT

package pathguard

import "golang.org/x/sys/unix"

const oracleOpenFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
