// SPDX-License-Identifier: MIT

package report

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of what the page shows of a record's text (the log keeps all of it).
const (
	// MaxSummaryBytes bounds the one-line summary of a record in the timeline.
	MaxSummaryBytes = 240
	// MaxDetailBytes bounds each string of a record's details shown on demand.
	MaxDetailBytes = 4096
	// maxKeyBytes bounds a details key.
	maxKeyBytes = 128
	// maxListItems bounds the items of a list in the details; the rest are counted.
	maxListItems = 64
	// maxDepth bounds nested objects in the details.
	maxDepth = 6
)

// writerMark starts the ending the log's writer gives a string it cut (audit's field bounds).
const writerMark = "…[truncated: "

// Visible returns s with every character that could change how the text around it is read
// replaced by a visible stand-in, so a reviewer sees it instead of having it applied: C0
// controls (newline and tab included) and DEL become their Unicode control pictures (␊, ␉,
// ␛, ␡), C1 controls, bidirectional overrides, isolates and marks, zero-width and line or
// paragraph separators become ⟦U+XXXX⟧. Invalid UTF-8 becomes U+FFFD. Visible is for HTML
// text: the page's escaping (html/template, textContent) handles <, >, & and quotes.
func Visible(s string) string {
	if isPlain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r < 0x20:
			b.WriteRune(0x2400 + r) // ␀ .. ␟
		case r == 0x7f:
			b.WriteRune('␡')
		case hidden(r):
			fmt.Fprintf(&b, "⟦U+%04X⟧", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hidden reports characters that are invisible or reorder text: C1 controls, the bidi
// embeddings, overrides, isolates and marks, zero-width characters, line and paragraph
// separators, the byte order mark and interlinear annotation marks.
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x00ad, r == 0x180e:
		return true
	case r >= 0x200b && r <= 0x200f: // zero-width space/joiners, LRM, RLM
		return true
	case r >= 0x2028 && r <= 0x202e: // LS, PS, LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2060 && r <= 0x206f: // word joiner, invisible operators, LRI..PDI, deprecated formats
		return true
	case r == 0xfeff, r >= 0xfff9 && r <= 0xfffb:
		return true
	}
	return false
}

func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// Clip returns s cut to at most max bytes (at a character boundary) and made Visible; a cut
// string ends in "…[clipped: N bytes]" naming its full length, so a reviewer knows there
// is more in the log (audit show --json has it whole).
//
// A string the log's writer already cut ends in "…[truncated: N bytes, sha256 H]"; that
// ending is kept, so the length stated is the original one.
func Clip(s string, max int) string {
	if len(s) <= max {
		return Visible(s)
	}
	if i := strings.LastIndex(s, writerMark); i >= 0 && len(s)-i < 160 && strings.HasSuffix(s, "]") {
		head, mark := s[:i], s[i:]
		return Clip(head, max) + Visible(mark)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return Visible(s[:cut]) + fmt.Sprintf("…[clipped: %d bytes]", len(s))
}
