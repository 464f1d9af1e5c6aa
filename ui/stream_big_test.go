// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSanitizingWriterBigWritesKeepText: a program writing to a pipe through stdio (glibc
// sizes a pipe's buffer at 4096 bytes) hands the copier 4096-byte writes cut at arbitrary
// bytes. Every such write reaches maxHeld, and Write then sanitises all it holds, the
// unfinished tail included, instead of holding only that tail: a UTF-8 character cut by the
// write boundary turns into U+FFFD on both sides, a colour sequence cut there is dropped
// and its rest ("1m") shown as text, and a CRLF cut there becomes two line breaks. Legitimate
// output of a legacy plugin on a terminal (box-drawing, non-Latin text, coloured compiler
// output) is garbled every 4 KiB. The held tail is at most a few bytes: the bound of maxHeld
// is for a sequence that never ends, not for text in front of it.
func TestSanitizingWriterBigWritesKeepText(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"utf-8", strings.Repeat("│ ├── café 名前\n", 600)},
		{"colour", strings.Repeat("\x1b[31merror\x1b[0m: x\n", 600)},
		{"crlf", "x" + strings.Repeat("windows lines.\r\n", 600)}, // a CR ends the 4096th byte
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := Sanitize(tc.text)
			require.Equal(t, strings.ReplaceAll(tc.text, "\r\n", "\n"), want, "the text survives Sanitize whole")
			for _, chunk := range []int{4096, 8192, 4099} {
				var out bytes.Buffer
				w := NewSanitizingWriter(&out)
				b := []byte(tc.text)
				for len(b) > 0 {
					n := min(chunk, len(b))
					_, err := w.Write(b[:n])
					require.NoError(t, err)
					b = b[n:]
				}
				require.NoError(t, w.Flush())
				assert.Equal(t, want, out.String(), "written in %d-byte writes: %d U+FFFD", chunk, strings.Count(out.String(), "\uFFFD"))
			}
		})
	}
}
