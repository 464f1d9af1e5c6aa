// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"io"
	"os"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"
)

// maxHeld bounds what a SanitizingWriter keeps back waiting for the end of an escape
// sequence or a character; once the unfinished tail reaches it, the bytes are sanitised and
// written as they are.
const maxHeld = 4 << 10

// SanitizingWriter streams plugin bytes (its stderr) to a terminal through Sanitize, so a
// plugin cannot drive the user's terminal (title, clipboard via OSC 52, cursor, queries
// whose answers the terminal would type back in) while colours still work. It writes as
// soon as it can: it holds back only an unfinished escape sequence or UTF-8 character at
// the end of a write, so a split sequence is judged whole.
type SanitizingWriter struct {
	mu   sync.Mutex
	w    io.Writer
	held []byte
}

// PluginStream is where bytes a plugin wrote (its stderr, a legacy plugin's stdout, an
// install hook's output) go on their way to w: through a SanitizingWriter when w is a
// terminal, where escape sequences drive the terminal (title, clipboard via OSC 52, queries
// whose answers it types into the user's input); w itself when it is a file or a pipe, so
// logs and redirected output keep every byte, as from the program run by hand. flush
// writes what the sanitiser still holds back; call it once the stream has ended. A nil w
// stays nil.
func PluginStream(w io.Writer) (out io.Writer, flush func()) {
	if f, ok := w.(*os.File); ok && f != nil && term.IsTerminal(int(f.Fd())) {
		sw := NewSanitizingWriter(f)
		return sw, func() { _ = sw.Flush() }
	}
	return w, func() {}
}

// NewSanitizingWriter wraps w.
func NewSanitizingWriter(w io.Writer) *SanitizingWriter { return &SanitizingWriter{w: w} }

// Write sanitises and forwards p; it always reports len(p) unless w fails.
func (s *SanitizingWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = append(s.held, p...)
	cut := safeCut(s.held)
	if cut == 0 && len(s.held) < maxHeld {
		return len(p), nil
	}
	if len(s.held)-cut >= maxHeld {
		// The unfinished tail alone has reached the bound: a sequence that never ends (or
		// one no terminal would wait for). Sanitise everything, so what it carries is
		// dropped and memory stays bounded. Only then: text in front of a tail that may
		// still end (a character, a colour sequence, a CR cut by the write boundary, as a
		// program writing 4 KiB stdio buffers to a pipe cuts them) is written, and the tail
		// is kept to be judged whole.
		cut = len(s.held)
	}
	out := Sanitize(string(s.held[:cut]))
	s.held = append(s.held[:0], s.held[cut:]...)
	if _, err := io.WriteString(s.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes whatever is held back (at the end of the stream).
func (s *SanitizingWriter) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) == 0 {
		return nil
	}
	out := Sanitize(string(s.held))
	s.held = s.held[:0]
	_, err := io.WriteString(s.w, out)
	return err
}

// safeCut is how much of b can be sanitised now: everything before an escape sequence that
// may still be unfinished, an incomplete UTF-8 character, or a trailing CR (whose meaning
// depends on whether \n follows).
func safeCut(b []byte) int {
	cut := len(b)
	// An ESC (or 8-bit C1 introducer) near the end that no terminator follows yet.
	if i := bytes.LastIndexByte(b, 0x1b); i >= 0 && !sequenceEnded(b[i+1:]) {
		cut = i
	}
	if i := lastC1Introducer(b[:cut]); i >= 0 && !c1Ended(b[i+1], b[i+2:]) {
		cut = i
	}
	// Incomplete UTF-8 at the end.
	for k := 1; k <= 3 && k <= cut; k++ {
		if utf8.RuneStart(b[cut-k]) {
			if !utf8.FullRune(b[cut-k : cut]) {
				cut -= k
			}
			break
		}
	}
	if cut > 0 && b[cut-1] == '\r' {
		cut--
	}
	return cut
}

// lastC1Introducer finds an 8-bit CSI/OSC/DCS/... (encoded as UTF-8: 0xC2 0x80-0x9F).
func lastC1Introducer(b []byte) int {
	for i := len(b) - 2; i >= 0 && i >= len(b)-maxHeld; i-- {
		if b[i] == 0xc2 && b[i+1] >= 0x80 && b[i+1] <= 0x9f {
			return i
		}
	}
	return -1
}

// c1Ended is sequenceEnded for an 8-bit introducer (0x80-0x9f, after its 0xC2 byte).
func c1Ended(intro byte, rest []byte) bool {
	switch intro {
	case 0x9b: // CSI
		for _, c := range rest {
			if c >= 0x40 && c <= 0x7e {
				return true
			}
		}
		return false
	case 0x90, 0x98, 0x9d, 0x9e, 0x9f: // DCS SOS OSC PM APC
		return bytes.IndexByte(rest, 0x07) >= 0 || bytes.Contains(rest, []byte{0x1b, '\\'}) ||
			bytes.Contains(rest, []byte{0xc2, 0x9c})
	default:
		return true
	}
}

// sequenceEnded reports whether the bytes after an introducer hold a plausible end: a CSI
// final byte, BEL, or ST. Conservative: when unsure, it says "not ended" and the writer
// waits for more (bounded by maxHeld).
func sequenceEnded(rest []byte) bool {
	if len(rest) == 0 {
		return false
	}
	switch rest[0] {
	case '[': // CSI: parameters then a final byte 0x40-0x7e
		for _, c := range rest[1:] {
			if c >= 0x40 && c <= 0x7e {
				return true
			}
		}
		return false
	case ']', 'P', 'X', '^', '_': // OSC DCS SOS PM APC: end with BEL or ST (ESC \)
		return bytes.IndexByte(rest, 0x07) >= 0 || bytes.Contains(rest, []byte{0x1b, '\\'})
	default: // two-byte escapes
		return true
	}
}

// HostLine writes one line of host text (a warning, an error) to w. Such a line quotes what
// a plugin chose (a path it created, its name, a message it sent), so on a terminal it goes
// through Sanitize like the plugin's own output: a gitlink named "x ESC ]52;c;... BEL" must
// not write the user's clipboard from inside a fledge warning. A file or a pipe gets the
// line as it is, as PluginStream does. One line: a trailing newline is added if missing.
func HostLine(w io.Writer, line string) error {
	if f, ok := w.(*os.File); ok && f != nil && term.IsTerminal(int(f.Fd())) {
		line = Sanitize(line)
	}
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line += "\n"
	}
	_, err := io.WriteString(w, line)
	return err
}

// HostWarnings returns a warning function writing "fledge: warning: " and the message to w
// through HostLine.
func HostWarnings(w io.Writer) func(string) {
	return func(msg string) { _ = HostLine(w, "fledge: warning: "+msg) }
}
