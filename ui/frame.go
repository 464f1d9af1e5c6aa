// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/mattn/go-runewidth"
	"golang.org/x/term"
)

// FramePrefix starts every line a FramedWriter writes.
const FramePrefix = "│ "

// Bounds of a FramedWriter: a line without an end is written in pieces of frameHeld
// bytes; a screen line is at most DefaultFrameWidth columns when the width is unknown.
const (
	frameHeld         = 4 << 10
	DefaultFrameWidth = 80
	// frameReserve is what a line's prefix may take on screen: "│" is one column in most
	// terminals and two where East Asian ambiguous characters are wide, plus the space
	// and one column to spare.
	frameReserve = 4
)

// FramedWriter shows a plugin's text inside a frame, so no line of it can pass for a line
// of fledge's own (a report, a command to copy): every line it writes starts with
// FramePrefix. The text is PlainText (no colours either: SGR 8 conceals, a colour carried
// into the next line could hide its prefix; no CR, no cursor movement that could go back
// over the prefix), tabs become spaces, and a line wider than the screen is cut into
// screen lines of their own, each with the prefix, so the terminal's own wrapping never
// starts a screen line with the plugin's words. It holds back only an unfinished line,
// at most frameHeld bytes.
type FramedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	width int
	held  []byte
}

// NewFramedWriter frames text written to it onto w, cut to width columns (0: w's terminal
// width when w is a terminal, else DefaultFrameWidth).
func NewFramedWriter(w io.Writer, width int) *FramedWriter {
	if width <= 0 {
		width = DefaultFrameWidth
		if f, ok := w.(*os.File); ok && f != nil && term.IsTerminal(int(f.Fd())) {
			if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
				width = cols
			}
		}
	}
	return &FramedWriter{w: w, width: max(width, frameReserve+8)}
}

// Write frames every complete line of p (and of what was held back); it reports len(p)
// unless w fails.
func (f *FramedWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = append(f.held, p...)
	var b strings.Builder
	for {
		i := bytes.IndexByte(f.held, '\n')
		if i < 0 {
			if len(f.held) < frameHeld {
				break
			}
			i = frameHeld
			f.frame(&b, f.held[:i])
			f.held = append(f.held[:0], f.held[i:]...)
			continue
		}
		f.frame(&b, f.held[:i])
		f.held = append(f.held[:0], f.held[i+1:]...)
	}
	if b.Len() > 0 {
		if _, err := io.WriteString(f.w, b.String()); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush frames what is held back (a last line without a newline).
func (f *FramedWriter) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.held) == 0 {
		return nil
	}
	var b strings.Builder
	f.frame(&b, f.held)
	f.held = f.held[:0]
	_, err := io.WriteString(f.w, b.String())
	return err
}

// frame writes one line of plugin text as framed screen lines.
func (f *FramedWriter) frame(b *strings.Builder, line []byte) {
	// "\r\n": the CR is the line's end, not a line of its own.
	line = bytes.TrimSuffix(line, []byte{'\r'})
	// A bare CR becomes a line break in PlainText: each piece is framed.
	for _, piece := range strings.Split(PlainText(string(line)), "\n") {
		piece = strings.ReplaceAll(piece, "\t", "    ")
		budget := f.width - frameReserve
		for {
			b.WriteString(FramePrefix)
			if runewidth.StringWidth(piece) <= budget {
				b.WriteString(piece)
				b.WriteByte('\n')
				break
			}
			cut, cols := 0, 0
			for cut < len(piece) {
				r, size := utf8.DecodeRuneInString(piece[cut:])
				w := runewidth.RuneWidth(r)
				if cols+w > budget && cut > 0 { // at least one character: never loop forever
					break
				}
				cols += w
				cut += size
			}
			b.WriteString(piece[:cut])
			b.WriteByte('\n')
			piece = piece[cut:]
		}
	}
}
