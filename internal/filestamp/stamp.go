// SPDX-License-Identifier: MIT

// Package filestamp tells a long-lived process whether a small file it reads over and over
// (a plugin's recorded handshake and its pins, read at every tool call of `fledge serve`)
// is still the one it read: by its device, inode, size and times, with the rule git uses
// for its index ("racy git"): a file changed less than Settle before it was stamped is not
// vouched for, since a change in the same clock tick would leave its times as they were.
package filestamp

import (
	"os"
	"time"
)

// Settle is how long a file must have been left alone before its stamp vouches for it. The
// kernel's file times are coarse (a clock tick); a second is far past that.
const Settle = time.Second

// Stamp identifies one state of a file. The zero Stamp matches nothing.
type Stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns
}

// Of stamps fi (an fstat taken before the file was read, or a stat now) and reports
// whether the stamp can vouch for the bytes: false when the platform gives no inode or
// change time, or when the file changed less than Settle before now. A file whose stamp
// equals a vouched stamp taken before it was read has not changed since: any change sets
// its change time to the current time, which no earlier settled stamp carries.
func Of(fi os.FileInfo, now time.Time) (Stamp, bool) {
	s, ok := stampOf(fi)
	if !ok || !fi.Mode().IsRegular() {
		return Stamp{}, false
	}
	limit := now.Add(-Settle).UnixNano()
	if s.mtime >= limit || s.ctime >= limit {
		return Stamp{}, false
	}
	return s, true
}
