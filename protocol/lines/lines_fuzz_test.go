// SPDX-License-Identifier: MIT

package lines

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReader: whatever a plugin of another protocol sends, every line handed on is at
// most maxLine bytes, non-blank, and exactly what the peer sent on that line (trimmed);
// over-long lines are reported as TooLong and never returned; reading always ends.
func FuzzReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n\n  \n{\"b\":2}\r\nlast"), 8)
	f.Add(bytes.Repeat([]byte("x"), 10000), 16)
	f.Add([]byte("\n\n\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		want := map[string]int{}
		parts := bytes.Split(data, []byte("\n"))
		for i, l := range parts {
			if i < len(parts)-1 { // a "\r" counts as part of the terminator only before "\n"
				l = bytes.TrimSuffix(l, []byte("\r"))
			}
			if tl := TrimSpace(l); len(tl) > 0 && len(l) <= max {
				want[string(tl)]++
			}
		}
		r := NewReader(bytes.NewReader(data), max)
		for i := 0; i <= len(data)+1; i++ {
			line, _, err := r.Next()
			if errors.Is(err, io.EOF) {
				for k, n := range want {
					if n > 0 {
						t.Fatalf("line %q (max %d) was never returned", k, max)
					}
				}
				return
			}
			if err != nil {
				if !errors.Is(err, ErrTooLong) {
					t.Fatalf("unexpected error %v", err)
				}
				continue
			}
			if len(line) > max || len(TrimSpace(line)) == 0 {
				t.Fatalf("line of %d bytes (max %d): %q", len(line), max, line)
			}
			if want[string(line)] == 0 {
				t.Fatalf("line %q was not sent (or not this often)", line)
			}
			want[string(line)]--
		}
		t.Fatalf("more reads than the input has bytes")
	})
}
