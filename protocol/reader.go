// SPDX-License-Identifier: MIT

package protocol

import (
	"errors"
	"fmt"
	"io"

	"github.com/fledgehq/fledge/protocol/lines"
)

// DefaultMaxLine is the default bound on one received line (without its newline).
const DefaultMaxLine = lines.DefaultMax

// MaxIDLen bounds a request id: the host keeps pending ids in memory and echoes them back,
// and no honest plugin needs a kilobyte to number its requests.
const MaxIDLen = 1024

// ReaderOptions configures a Reader.
type ReaderOptions struct {
	// MaxLine bounds one line in bytes, excluding the line terminator. Default 1 MiB.
	MaxLine int
	// Inbound selects the direction: true decodes what a plugin receives (init, response,
	// cancel); false decodes what the host receives from a plugin (prompt ... metadata).
	// Types of the other direction are UnknownType.
	Inbound bool
	// Transient lets Next return output and log messages that leave no garbage: the
	// message is the Reader's own and its strings point into the Reader's buffers, so both
	// are valid only until the next call to Next. For a loop that hands each message on
	// before it reads the next and keeps none of its strings (copy what must be kept).
	// Other messages are always the caller's.
	Transient bool
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
	sc    *lines.Scanner // the bounded framing every line protocol shares
	opts  ReaderOptions
	line  int
	err   error // sticky: io.EOF or a wrapped read error
	stats ReaderStats
	fast  *transientMessage // with Transient: the message every fast-path line reuses
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader, opts ReaderOptions) *Reader {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	rd := &Reader{sc: lines.NewScanner(r, opts.MaxLine), opts: opts}
	if opts.Transient && !opts.Inbound {
		rd.fast = &transientMessage{}
	}
	return rd
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
		if r.fast != nil {
			r.fast.reset()
		}
		msg, lerr := decodeLine(line, r.opts.Inbound, r.fast)
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

// readLine is the shared framing's ReadLine, counting the bytes it consumed.
func (r *Reader) readLine() (line []byte, raw, n int64, tooLong bool, err error) {
	before := r.sc.BytesRead()
	line, raw, n, tooLong, err = r.sc.ReadLine()
	r.stats.BytesRead += r.sc.BytesRead() - before
	return line, raw, n, tooLong, err
}

func trimSpace(b []byte) []byte { return lines.TrimSpace(b) }
