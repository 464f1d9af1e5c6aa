// SPDX-License-Identifier: MIT

package protocol

import (
	"bufio"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// streamBuffer bounds what SendStream holds in memory at once.
const streamBuffer = 64 << 10

// StreamEncoder writes the pieces of one message straight to the stream. Its string
// encoding is byte-for-byte what Send produces through encoding/json (HTML not escaped,
// U+2028/U+2029 escaped, each invalid UTF-8 byte as \ufffd).
type StreamEncoder struct {
	bw  *bufio.Writer
	n   int
	err error
}

// Raw writes s verbatim (the caller's fixed JSON punctuation and keys).
func (e *StreamEncoder) Raw(s string) {
	if e.err == nil {
		var n int
		n, e.err = e.bw.WriteString(s)
		e.n += n
	}
}

// RawBytes writes b verbatim (an id already validated as JSON).
func (e *StreamEncoder) RawBytes(b []byte) {
	if e.err == nil {
		var n int
		n, e.err = e.bw.Write(b)
		e.n += n
	}
}

// Int writes a JSON number.
func (e *StreamEncoder) Int(v int) { e.Raw(strconv.Itoa(v)) }

// String writes the concatenation of parts as one JSON string (each part is escaped on its
// own, so a character split across parts counts as invalid bytes: split at boundaries).
func (e *StreamEncoder) String(parts ...[]byte) {
	e.Raw(`"`)
	for _, b := range parts {
		e.stringBody(b)
	}
	e.Raw(`"`)
}

func (e *StreamEncoder) stringBody(b []byte) {
	start := 0
	flush := func(i int) {
		if start < i {
			e.RawBytes(b[start:i])
		}
	}
	for i := 0; i < len(b) && e.err == nil; {
		c := b[i]
		if c < utf8.RuneSelf {
			var esc string
			switch {
			case c == '"':
				esc = `\"`
			case c == '\\':
				esc = `\\`
			case c == '\n':
				esc = `\n`
			case c == '\r':
				esc = `\r`
			case c == '\t':
				esc = `\t`
			case c == '\b':
				esc = `\b`
			case c == '\f':
				esc = `\f`
			case c < 0x20:
				esc = fmt.Sprintf(`\u%04x`, c)
			default:
				i++
				continue
			}
			flush(i)
			e.Raw(esc)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			flush(i)
			e.Raw(`\ufffd`)
		case r == '\u2028':
			flush(i)
			e.Raw(`\u2028`)
		case r == '\u2029':
			flush(i)
			e.Raw(`\u2029`)
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	flush(len(b))
}

// SendStream writes one message that fn produces piece by piece, without building the line
// in memory: for exec replies, whose output would otherwise be copied several times over.
// fn must write exactly one JSON object; the newline is added here. The writer's lock is
// held throughout, so lines never interleave. A write error, or a line longer than the
// limit (the caller must bound its pieces; the stream then holds a line no plugin should
// trust), breaks the writer for good.
func (w *Writer) SendStream(fn func(e *StreamEncoder)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	e := &StreamEncoder{bw: bufio.NewWriterSize(w.w, streamBuffer)}
	fn(e)
	e.Raw("\n")
	if e.err == nil {
		e.err = e.bw.Flush()
	}
	if e.err != nil {
		w.err = fmt.Errorf("%w: %w", ErrWriterBroken, e.err)
		return fmt.Errorf("protocol: stream write: %w", e.err)
	}
	if e.n > w.max {
		w.err = fmt.Errorf("%w: streamed line of %d bytes, limit %d", ErrWriterBroken, e.n, w.max)
		return fmt.Errorf("%w: streamed %d bytes, limit %d", ErrLineTooLong, e.n, w.max)
	}
	return nil
}
