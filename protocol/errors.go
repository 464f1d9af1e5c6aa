// SPDX-License-Identifier: MIT

package protocol

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/fledgehq/fledge/protocol/lines"
)

// ErrSkipped matches (errors.Is) every *LineError: the line was dropped and the stream goes on.
var ErrSkipped = errors.New("protocol: line skipped")

// ErrLineTooLong: a line over the bound, either way: Writer.Send refuses to encode it, and a
// reader's *LineError of kind TooLong matches it (the line was consumed and dropped).
var ErrLineTooLong = lines.ErrTooLong

// ErrNotObject is returned by Writer.Send for a value that does not encode to a JSON object.
var ErrNotObject = errors.New("protocol: message does not encode to a JSON object")

// ErrWriterBroken is returned by Writer.Send after an earlier write failed: the peer may hold
// half a line, so nothing more can be framed reliably.
var ErrWriterBroken = errors.New("protocol: writer broken by an earlier write error")

// LineErrorKind says why a line was skipped.
type LineErrorKind int

const (
	// TooLong: the line exceeded ReaderOptions.MaxLine; it was discarded unread.
	TooLong LineErrorKind = iota + 1
	// Malformed: not a JSON object, bad JSON, or a field of the wrong JSON type.
	Malformed
	// UnknownType: a type this side does not handle, or a missing/empty type.
	UnknownType
	// MissingID: a request that needs a response carries no usable id.
	MissingID
	// Invalid: a known type with a required field missing or out of range.
	Invalid
)

func (k LineErrorKind) String() string {
	switch k {
	case TooLong:
		return "too_long"
	case Malformed:
		return "malformed"
	case UnknownType:
		return "unknown_type"
	case MissingID:
		return "missing_id"
	case Invalid:
		return "invalid"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// LineError describes one skipped line. The caller logs it and calls Reader.Next again.
type LineError struct {
	Line int           // 1-based line number
	Kind LineErrorKind // why it was skipped
	Type string        // the message type, when it could be read
	// ID is the request id when the line carried a usable one (e.g. an exec without a
	// command): the host can still answer it, so the plugin does not wait forever.
	ID     ID
	Detail string // human-readable cause
	// Length is the length of the line in bytes without its terminator (for TooLong: as much
	// of it as was read before the skip was reported).
	Length int64
}

func (e *LineError) Error() string {
	prefix := "line " + strconv.Itoa(e.Line) + ": skipped: "
	switch e.Kind {
	case TooLong:
		return prefix + e.Detail
	case Malformed:
		return prefix + "malformed JSON: " + e.Detail
	case UnknownType:
		if e.Type == "" {
			return prefix + "no message type"
		}
		return prefix + "unknown message type " + quoteForLog(e.Type)
	case MissingID:
		return prefix + quoteForLog(e.Type) + " request without a usable id: " + e.Detail
	case Invalid:
		return prefix + "invalid " + quoteForLog(e.Type) + " message: " + e.Detail
	}
	return prefix + e.Detail
}

// Is makes errors.Is(err, ErrSkipped) true for every LineError, and errors.Is(err,
// ErrLineTooLong) for one of kind TooLong.
func (e *LineError) Is(target error) bool {
	return target == ErrSkipped || (target == ErrLineTooLong && e.Kind == TooLong)
}

// quoteForLog quotes plugin-controlled text for a log line: escapes make terminal control
// sequences harmless and the cap keeps a hostile type name from flooding the log.
func quoteForLog(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

func tooLongDetail(n int64, limit int) string { return lines.TooLongDetail(n, limit) }
