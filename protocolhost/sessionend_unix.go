// SPDX-License-Identifier: MIT

//go:build unix

package protocolhost

import "golang.org/x/sys/unix"

// outputBroken reports whether fd 1 or 2 lost its reader: a pipe whose read end is closed
// polls POLLERR, a socket whose peer is gone POLLHUP (or POLLERR). A terminal or a file is
// never broken this way (a hung-up terminal is SIGHUP's ending).
func outputBroken() bool {
	for _, fd := range []int{1, 2} {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			continue
		}
		var gone int16
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFIFO:
			gone = unix.POLLERR
		case unix.S_IFSOCK:
			gone = unix.POLLERR | unix.POLLHUP
		default:
			continue
		}
		// Events 0: only the conditions always reported; timeout 0: never waits.
		p := []unix.PollFd{{Fd: int32(fd)}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 && p[0].Revents&gone != 0 {
			return true
		}
	}
	return false
}
