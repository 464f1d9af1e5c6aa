// SPDX-License-Identifier: MIT

package lines

import (
	"strings"
	"testing"
)

// TestScannerDropsLongLineBuffer: the buffer a line longer than one read chunk was put
// together in is not kept for the lines after it, so one long line does not pin up to the
// bound for the rest of a session.
func TestScannerDropsLongLineBuffer(t *testing.T) {
	long := strings.Repeat("x", 900<<10)
	s := NewScanner(strings.NewReader(long+"\nshort\n"), DefaultMax)
	line, _, _, tooLong, err := s.ReadLine()
	if err != nil || tooLong || len(line) != len(long) {
		t.Fatalf("long line: %d bytes, too long %v, err %v", len(line), tooLong, err)
	}
	if cap(s.long) < len(long) {
		t.Fatalf("the long line was not assembled in s.long (cap %d)", cap(s.long))
	}
	line, _, _, _, err = s.ReadLine()
	if err != nil || string(line) != "short" {
		t.Fatalf("short line: %q, %v", line, err)
	}
	if cap(s.long) > maxKeptLong {
		t.Fatalf("s.long keeps %d bytes after a short line; at most %d", cap(s.long), maxKeptLong)
	}
}
