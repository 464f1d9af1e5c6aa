// SPDX-License-Identifier: MIT

package ui

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	esc = 0x1b
	bel = 0x07
	can = 0x18 // CAN and SUB abort a control string in every terminal we care about
	sub = 0x1a

	// maxSGRParams bounds a kept colour sequence: nothing legitimate needs more, and a
	// megabyte of "1;1;1;..." is not a colour.
	maxSGRParams = 64
)

// Sanitize returns s made safe to show on a terminal. It keeps printable text, \n, \t and
// SGR colour sequences (ESC [ digits/; m) and removes everything that can drive the
// terminal instead of being shown by it:
//
//   - OSC strings (ESC ] ... BEL or ST): hyperlinks, window titles, clipboard writes (OSC 52);
//   - DCS, SOS, PM and APC strings (ESC P, ESC X, ESC ^, ESC _ ... ST);
//   - every CSI sequence that is not SGR: cursor movement, erase, mode set, DSR queries;
//   - all other ESC sequences (charset switches, ESC c reset, ESC 7/8 cursor save, ...);
//   - C0 controls other than \n and \t, DEL, and C1 controls U+0080..U+009F (the 8-bit
//     CSI U+009B and friends start a sequence that is removed whole);
//   - bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069, U+200E/F) and
//     U+2028/U+2029, which reorder or break lines behind the reader's back.
//
// A carriage return never survives: "\r\n" becomes "\n" and a bare "\r" becomes "\n",
// because a bare CR lets later text overwrite what is already on the line (a plugin could
// print a harmless line over a dangerous one). Bytes that are not valid UTF-8 become
// U+FFFD, one per byte. Sanitize is idempotent.
func Sanitize(s string) string { return sanitize(s, true) }

// plainText is Sanitize without colours, for places that measure or truncate text
// (progress descriptions, plugin names, option labels).
func plainText(s string) string { return sanitize(s, false) }

// PlainText is Sanitize without colours either: for a plugin's words fledge passes on as
// data (tool and parameter descriptions, messages in results), read by people and by
// programs alike. A colour there is the plugin's way to hide words from the person (SGR 8
// conceals, same foreground and background) while a model reading the same text sees them.
func PlainText(s string) string { return plainText(s) }

func sanitize(s string, keepSGR bool) string {
	if isPlain(s) {
		return s // nothing to remove or replace: no copy (a chatty plugin's usual line)
	}
	return sanitizeSlow(s, keepSGR)
}

// isPlain reports whether s is printable ASCII, \n and \t only: what sanitize keeps as is.
func isPlain[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\n' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

func sanitizeSlow(s string, keepSGR bool) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == esc:
			i = escapeSeq(s, i+1, &b, keepSGR)
			continue
		case r == 0x9b: // 8-bit CSI: dropped whole, colours included (7-bit SGR is enough)
			i = csi(s, i+size, nil, false)
			continue
		case r == 0x90 || r == 0x98 || r == 0x9d || r == 0x9e || r == 0x9f: // DCS SOS OSC PM APC
			i = controlString(s, i+size)
			continue
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
			if i+1 >= len(s) || s[i+1] != '\n' {
				b.WriteByte('\n')
			} // "\r\n": the \n that follows is written on the next turn
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			// other C0, DEL, C1: dropped
		case isHiddenFormat(r):
			// dropped
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isHiddenFormat reports format characters that change how surrounding text is laid out
// without being visible themselves ("Trojan Source" reordering, line separators).
func isHiddenFormat(r rune) bool {
	switch {
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f,
		r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// escapeSeq handles the bytes after an ESC at s[i:], writing a kept SGR sequence to b, and
// returns where normal text resumes.
func escapeSeq(s string, i int, b *strings.Builder, keepSGR bool) int {
	if i >= len(s) {
		return i
	}
	switch c := s[i]; {
	case c == '[':
		return csi(s, i+1, b, keepSGR)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return controlString(s, i+1)
	case c >= 0x20 && c <= 0x2f: // intermediates, then one final byte: nF sequences
		j := i
		for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
			j++
		}
		if j < len(s) && s[j] >= 0x30 && s[j] <= 0x7e {
			j++
		}
		return j
	case c >= 0x30 && c <= 0x7e: // two-byte sequences: ESC 7, ESC c, ESC M, ...
		return i + 1
	default: // ESC before a control or non-ASCII byte: drop the ESC alone
		return i
	}
}

// csi parses a control sequence whose parameters start at s[i]. A complete SGR sequence
// with only digits and ';' is written to b when keep is set; anything else is dropped. An
// unterminated or malformed sequence is dropped up to the offending byte, which is then
// processed as ordinary input.
func csi(s string, i int, b *strings.Builder, keep bool) int {
	start := i
	for i < len(s) && s[i] >= 0x30 && s[i] <= 0x3f {
		i++
	}
	params := s[start:i]
	interStart := i
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
		i++
	}
	if i >= len(s) || s[i] < 0x40 || s[i] > 0x7e {
		return i
	}
	if keep && b != nil && s[i] == 'm' && i == interStart && len(params) <= maxSGRParams &&
		strings.Trim(params, "0123456789;") == "" {
		b.WriteString("\x1b[")
		b.WriteString(params)
		b.WriteByte('m')
	}
	return i + 1
}

// controlString skips the body of an OSC/DCS/SOS/PM/APC string starting at s[i] and returns
// the index after its terminator: BEL, ST (ESC \ or U+009C), or CAN/SUB, which abort it.
// An ESC that does not start ST also ends the string (terminals abort it there) and is
// left to be parsed as the next sequence. An unterminated string runs to the end of s.
func controlString(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case bel, can, sub:
			return i + 1
		case esc:
			if i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
			return i
		case 0xc2:
			if i+1 < len(s) && s[i+1] == 0x9c {
				return i + 2
			}
		}
		i++
	}
	return i
}

// clipLines bounds text shown for a plugin: each line is cut at maxLine bytes (on a rune
// boundary, marked with "…") and at most maxLines lines are kept, the rest summarised.
// s must already be sanitised; a cut through a colour sequence is cleaned up by
// re-sanitising the cut line.
func clipLines(s string, maxLine, maxLines int) string {
	if maxLines > 0 && linesFit(s, maxLine, maxLines) {
		return s // nothing to cut: no copy (a chatty plugin's usual message)
	}
	return clipLinesFull(s, maxLine, maxLines)
}

// linesFit reports whether s has at most maxLines lines of at most maxLine bytes each,
// counted as clipLinesFull counts them (a final "\n" starts one more, empty, line).
func linesFit(s string, maxLine, maxLines int) bool {
	for n := 1; n <= maxLines; n++ {
		ln, rest, more := strings.Cut(s, "\n")
		if len(ln) > maxLine {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
	return false
}

func clipLinesFull(s string, maxLine, maxLines int) string {
	lines := strings.SplitAfterN(s, "\n", maxLines+1)
	extra := 0
	if len(lines) > maxLines {
		extra = strings.Count(lines[maxLines], "\n") + 1
		lines = lines[:maxLines]
	}
	var b strings.Builder
	for _, ln := range lines {
		nl := strings.HasSuffix(ln, "\n")
		body := strings.TrimSuffix(ln, "\n")
		if len(body) > maxLine {
			cut := maxLine
			for cut > 0 && !utf8.RuneStart(body[cut]) {
				cut--
			}
			body = sanitize(body[:cut], true) + "…"
		}
		b.WriteString(body)
		if nl {
			b.WriteByte('\n')
		}
	}
	if extra > 0 {
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("… (")
		b.WriteString(strconv.Itoa(extra))
		b.WriteString(" more lines)")
	}
	return b.String()
}

// oneLine flattens plain text onto a single line (labels, names, progress descriptions).
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

// Clip cuts s to at most n bytes (on a rune boundary) and marks the cut with "...": for
// plugin text quoted in fledge's own messages, which must stay one readable line.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
