//go:build linux

package stub

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64
