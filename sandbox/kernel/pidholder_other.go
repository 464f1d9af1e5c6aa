// SPDX-License-Identifier: MIT

//go:build linux && !amd64

package kernel

// ForkPidHolder is amd64 only (its child is assembly): elsewhere the caller starts the Go
// holder, an exec of fledge.
func ForkPidHolder(sock int, marker string) (pid, pidfd int, err error) {
	return -1, -1, ErrUnsupported
}

// ForkUserNS is amd64 only (its child is assembly): elsewhere the caller makes the
// namespace another way.
func ForkUserNS(uidMap, gidMap string) (int, error) { return -1, ErrUnsupported }
