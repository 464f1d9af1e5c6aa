package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxLine is the default bound on one received line (without its newline).
const DefaultMaxLine = 1 << 20

// MaxIDLen bounds a request id: the host keeps pending ids in memory and echoes them back,
// and no honest plugin needs a kilobyte to number its requests.
const MaxIDLen = 1024

// maxChunk is the bufio buffer size: lines up to it are decoded straight from the buffer
// without a copy; longer ones are assembled (up to MaxLine) or discarded chunk by chunk.
const maxChunk = 64 << 10

// ReaderOptions configures a Reader.
type ReaderOptions struct {
	// MaxLine bounds one line in bytes, excluding the line terminator. Default 1 MiB.
	MaxLine int
	// Inbound selects the direction: true decodes what a plugin receives (init, response,
	// cancel); false decodes what the host receives from a plugin (prompt ... metadata).
	// Types of the other direction are UnknownType.
	Inbound bool
}

// SkipCounts counts skipped lines by kind.
type SkipCounts struct {
	TooLong     int64
	Malformed   int64
	UnknownType int64
	MissingID   int64
	Invalid     int64
}

// Total is the number of skipped lines of every kind.
func (s SkipCounts) Total() int64 {
	return s.TooLong + s.Malformed + s.UnknownType + s.MissingID + s.Invalid
}

func (s *SkipCounts) add(k LineErrorKind) {
	switch k {
	case TooLong:
		s.TooLong++
	case Malformed:
		s.Malformed++
	case UnknownType:
		s.UnknownType++
	case MissingID:
		s.MissingID++
	case Invalid:
		s.Invalid++
	}
}

// ReaderStats counts what a Reader has seen.
type ReaderStats struct {
	Lines     int64 // lines read, blank ones included
	Messages  int64 // messages returned
	Skipped   SkipCounts
	BytesRead int64 // bytes consumed from the underlying reader, terminators included
}

// Reader decodes fledge-v1 messages from newline-delimited JSON. It holds at most
// MaxLine (+ one buffer) bytes of any line, whatever the peer sends. A Reader is not safe for
// concurrent use; call Stats from the goroutine that calls Next, or after it is done.
type Reader struct {
	br    *bufio.Reader
	opts  ReaderOptions
	line  int
	long  []byte // assembly buffer for lines longer than one bufio chunk
	err   error  // sticky: io.EOF or a wrapped read error
	stats ReaderStats
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader, opts ReaderOptions) *Reader {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	size := opts.MaxLine + 2 // room for "\r\n"
	if size > maxChunk {
		size = maxChunk
	}
	if size < 4096 {
		size = 4096
	}
	return &Reader{br: bufio.NewReaderSize(r, size), opts: opts}
}

// Stats returns the counters so far.
func (r *Reader) Stats() ReaderStats { return r.stats }

// Next returns the next message. At the clean end of the stream it returns io.EOF. For a
// line it skips it returns a *LineError (errors.Is(err, ErrSkipped)); the caller logs it and
// calls Next again. Blank lines are ignored. Any other error is a read error, returned
// wrapped, and returned again by every later call.
func (r *Reader) Next() (*Message, error) {
	for {
		if r.err != nil {
			return nil, r.err
		}
		line, raw, n, tooLong, err := r.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			r.err = fmt.Errorf("protocol: read line %d: %w", r.line+1, err)
			return nil, r.err
		}
		if err != nil { // io.EOF: a final unterminated line is still processed
			r.err = io.EOF
			if raw == 0 {
				return nil, io.EOF
			}
		}
		r.line++
		r.stats.Lines++
		if tooLong {
			r.stats.Skipped.TooLong++
			return nil, &LineError{Line: r.line, Kind: TooLong, Length: n,
				Detail: tooLongDetail(n, r.opts.MaxLine)}
		}
		line = trimSpace(line)
		if len(line) == 0 {
			continue
		}
		msg, lerr := decodeLine(line, r.opts.Inbound)
		if lerr != nil {
			lerr.Line = r.line
			lerr.Length = n
			r.stats.Skipped.add(lerr.Kind)
			return nil, lerr
		}
		msg.Line = r.line
		r.stats.Messages++
		return msg, nil
	}
}

// readLine returns one line without its "\n" (and "\r"), the raw bytes it spanned, its length
// without the terminator, and whether it exceeded MaxLine. The returned slice is valid until the next call. A too-long
// line is consumed in buffer-sized chunks and dropped, so memory stays O(MaxLine + buffer).
func (r *Reader) readLine() (line []byte, raw, n int64, tooLong bool, err error) {
	r.long = r.long[:0]
	limit := r.opts.MaxLine + 2 // content plus an optional "\r\n"
	for {
		chunk, e := r.br.ReadSlice('\n')
		n += int64(len(chunk))
		r.stats.BytesRead += int64(len(chunk))
		if e == bufio.ErrBufferFull {
			if !tooLong {
				if len(r.long)+len(chunk) > limit {
					tooLong = true
					r.long = r.long[:0]
				} else {
					r.long = append(r.long, chunk...)
				}
			}
			continue
		}
		if !tooLong {
			if len(r.long) > 0 {
				r.long = append(r.long, chunk...)
				line = r.long
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
	if len(line) > r.opts.MaxLine {
		return nil, raw, n, true, err
	}
	return line, raw, n, false, err
}

func trimSpace(b []byte) []byte {
	return bytes.TrimFunc(b, func(c rune) bool {
		return c == ' ' || c == '\t' || c == '\r' || c == '\n'
	})
}
