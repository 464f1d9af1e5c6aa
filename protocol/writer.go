// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// DefaultMaxWriteLine bounds one encoded message: an exec response carries up to 2x10 MiB of
// output, which JSON escaping can grow to a few times that.
const DefaultMaxWriteLine = 64 << 20

// WriterOptions configures a Writer.
type WriterOptions struct {
	// MaxLine bounds one encoded message in bytes, newline included. Default 64 MiB.
	MaxLine int
}

// Writer writes fledge-v1 messages, one JSON object per line.
//
// Text rule: every line is valid UTF-8 JSON. Go strings are written as JSON text, and each
// byte that is not part of valid UTF-8 (a command's binary stdout, say) becomes U+FFFD. Plugins are
// written in every language and many of their JSON parsers reject, or silently mangle,
// invalid UTF-8; a line one of them cannot parse would be a lost response and a hung
// plugin. Raw JSON (json.RawMessage, such as echoed ids) is held to the same rule. HTML
// characters are not escaped, and U+2028/U+2029 are, as encoding/json does.
//
// Send is safe for concurrent use: each message is encoded first and then written with one
// Write call, so lines never interleave.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	max int
	err error // sticky: after a failed write the stream may hold half a line
}

// NewWriter returns a Writer with default options.
func NewWriter(w io.Writer) *Writer { return NewWriterOptions(w, WriterOptions{}) }

// NewWriterOptions returns a Writer with the given options.
func NewWriterOptions(w io.Writer, opts WriterOptions) *Writer {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxWriteLine
	}
	return &Writer{w: w, max: opts.MaxLine}
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Encode returns the line Send would write for v, terminating newline included.
func Encode(v any) ([]byte, error) {
	buf := new(bytes.Buffer)
	if err := encodeInto(buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func encodeInto(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("protocol: encode %T: %w", v, err)
	}
	b := buf.Bytes()
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("%w: %T", ErrNotObject, v)
	}
	// Only raw JSON can carry invalid UTF-8 this far (encoding/json coerces strings); inside
	// valid JSON such bytes can only sit in strings, so replacing them keeps the line valid.
	if !utf8.Valid(b) {
		fixed := string([]rune(string(b))) // each invalid byte -> U+FFFD, as encoding/json does
		buf.Reset()
		buf.WriteString(fixed)
	}
	return nil
}

// Send encodes v as one line and writes it with a single Write call.
func (w *Writer) Send(v any) error {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 1<<20 { // do not pin big exec replies in the pool
			bufPool.Put(buf)
		}
	}()
	if err := encodeInto(buf, v); err != nil {
		return err
	}
	if buf.Len() > w.max {
		return fmt.Errorf("%w: %T encodes to %d bytes, limit %d", ErrLineTooLong, v, buf.Len(), w.max)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if _, err := w.w.Write(buf.Bytes()); err != nil {
		w.err = fmt.Errorf("%w: %w", ErrWriterBroken, err)
		return fmt.Errorf("protocol: write %T: %w", v, err)
	}
	return nil
}
