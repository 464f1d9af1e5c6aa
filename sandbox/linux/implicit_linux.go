// SPDX-License-Identifier: MIT

package linux

// Paths every confined command gets besides the Spec's own:
//   - /etc read-only (resolver, passwd lookups, locale, ssl certs), without its root-only
//     secrets (etcSecrets, etc_linux.go);
//   - /proc read-only: ps and /dev/fd need it; other processes' environ, mem and fds stay
//     out of reach because Landlock also denies ptrace-mode access outside the domain;
//   - the harmless character devices read-only, and /dev/null read-write.
//
// Not granted: /dev/tty (no terminal, see stub), /dev/shm, /sys, /run, $HOME.
var (
	implicitReadOnly  = []string{"/etc", "/proc", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"}
	implicitReadWrite = []string{"/dev/null"}
)
