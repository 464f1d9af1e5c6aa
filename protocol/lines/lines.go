// SPDX-License-Identifier: MIT

// Package lines is the bounded line framing every line-based protocol shares (fledge-v1,
// JSON-RPC 2.0, runtime-v1, invoke-v1, MCP over stdio): newline-delimited lines of at most a
// limit, whatever the peer sends. A line over the limit is consumed in buffer-sized chunks
// and dropped, so memory stays O(limit + one buffer).
package lines

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMax is the default bound on one line (without its newline).
const DefaultMax = 1 << 20

// maxChunk is the bufio buffer size: lines up to it are handed on straight from the buffer
// without a copy; longer ones are assembled (up to the limit) or discarded chunk by chunk.
const maxChunk = 64 << 10

// ErrTooLong: a line over the bound, either way: a writer refuses to encode it, and a
// reader's *TooLongError matches it (the line was consumed and dropped).
var ErrTooLong = errors.New("protocol: line exceeds the line limit")

// TooLongError is one line dropped for its length; the stream goes on.
type TooLongError struct {
	Line   int   // 1-based line number
	Length int64 // bytes of it read before the skip was reported, without the terminator
	Limit  int
}

func (e *TooLongError) Error() string {
	return fmt.Sprintf("line %d: skipped: %s", e.Line, TooLongDetail(e.Length, e.Limit))
}

// Is makes errors.Is(err, ErrTooLong) true.
func (e *TooLongError) Is(target error) bool { return target == ErrTooLong }

// TooLongDetail says how long a dropped line was and what the limit is.
func TooLongDetail(n int64, limit int) string {
	return fmt.Sprintf("line too long (at least %d bytes, limit %d)", n, limit)
}

// maxKeptLong is the largest assembly buffer kept from one line to the next.
const maxKeptLong = 64 << 10

// Scanner reads raw lines of at most Max bytes. It is not safe for concurrent use.
type Scanner struct {
	br        *bufio.Reader
	max       int
	long      []byte // assembly buffer for lines longer than one bufio chunk
	bytesRead int64
}

// NewScanner reads lines of at most max bytes (DefaultMax when max <= 0) from r.
func NewScanner(r io.Reader, max int) *Scanner {
	if max <= 0 {
		max = DefaultMax
	}
	size := max + 2 // room for "\r\n"
	if size > maxChunk {
		size = maxChunk
	}
	if size < 4096 {
		size = 4096
	}
	return &Scanner{br: bufio.NewReaderSize(r, size), max: max}
}

// Max is the bound in force.
func (s *Scanner) Max() int { return s.max }

// BytesRead is every byte consumed so far, terminators included.
func (s *Scanner) BytesRead() int64 { return s.bytesRead }

// ReadLine returns one line without its "\n" (and "\r"), the raw bytes it spanned, its
// length without the terminator, and whether it exceeded the bound. The returned slice is
// valid until the next call. err is io.EOF at the end (a final unterminated line comes with
// it, raw > 0) or the read error.
func (s *Scanner) ReadLine() (line []byte, raw, n int64, tooLong bool, err error) {
	if cap(s.long) > maxKeptLong {
		// One long line does not pin its size (up to the bound) for the rest of the stream.
		s.long = nil
	}
	s.long = s.long[:0]
	limit := s.max + 2 // content plus an optional "\r\n"
	for {
		chunk, e := s.br.ReadSlice('\n')
		n += int64(len(chunk))
		s.bytesRead += int64(len(chunk))
		if e == bufio.ErrBufferFull {
			if !tooLong {
				if len(s.long)+len(chunk) > limit {
					tooLong = true
					s.long = s.long[:0]
				} else {
					s.long = append(s.long, chunk...)
				}
			}
			continue
		}
		if !tooLong {
			if len(s.long) > 0 {
				s.long = append(s.long, chunk...)
				line = s.long
			} else {
				line = chunk
			}
		}
		err = e
		break
	}
	raw = n
	if tooLong {
		if err == nil {
			n-- // the "\n" was read but is not part of the line
		}
		return nil, raw, n, true, err
	}
	if len(line) > 0 && line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
	}
	n = int64(len(line))
	if len(line) > s.max {
		return nil, raw, n, true, err
	}
	return line, raw, n, false, err
}

// TrimSpace drops spaces, tabs and line ends around b.
func TrimSpace(b []byte) []byte {
	return bytes.TrimFunc(b, func(c rune) bool {
		return c == ' ' || c == '\t' || c == '\r' || c == '\n'
	})
}

// Reader hands on non-blank lines of at most a bound, for the protocols whose messages are
// one JSON value per line. Blank lines are skipped.
type Reader struct {
	s    *Scanner
	line int
	err  error // sticky: io.EOF or a wrapped read error
}

// NewReader reads lines of at most max bytes (default 1 MiB) from r.
func NewReader(r io.Reader, max int) *Reader { return &Reader{s: NewScanner(r, max)} }

// Next returns the next non-blank line (a copy the caller owns) and its line number. A line
// over the bound gives a *TooLongError (errors.Is(err, ErrTooLong)); the caller may go on
// reading. io.EOF at the clean end; other read errors are sticky.
func (l *Reader) Next() ([]byte, int, error) {
	for {
		if l.err != nil {
			return nil, l.line, l.err
		}
		line, raw, n, tooLong, err := l.s.ReadLine()
		if err != nil && !errors.Is(err, io.EOF) {
			l.err = fmt.Errorf("read line %d: %w", l.line+1, err)
			return nil, l.line, l.err
		}
		if err != nil {
			l.err = io.EOF
			if raw == 0 {
				return nil, l.line, io.EOF
			}
		}
		l.line++
		if tooLong {
			return nil, l.line, &TooLongError{Line: l.line, Length: n, Limit: l.s.max}
		}
		line = TrimSpace(line)
		if len(line) == 0 {
			if l.err != nil {
				return nil, l.line, l.err
			}
			continue
		}
		return append([]byte(nil), line...), l.line, nil
	}
}
