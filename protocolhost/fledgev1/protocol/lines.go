package protocol

import (
	"errors"
	"fmt"
	"io"
)

// LineReader reads newline-delimited lines of at most MaxLine bytes, for the protocols that
// are not fledge-v1 (JSON-RPC, runtime-v1, invoke-v1): the same bounded reading as Reader,
// without the fledge-v1 decoding. Blank lines are skipped.
type LineReader struct {
	r *Reader
}

// NewLineReader reads lines of at most maxLine bytes (default 1 MiB) from rd.
func NewLineReader(rd io.Reader, maxLine int) *LineReader {
	return &LineReader{r: NewReader(rd, ReaderOptions{MaxLine: maxLine})}
}

// Next returns the next non-blank line (a copy the caller owns) and its line number. A line
// over the bound gives a *LineError of kind TooLong (errors.Is(err, ErrLineTooLong)); the
// caller may go on reading. io.EOF at the clean end; other read errors are sticky.
func (l *LineReader) Next() ([]byte, int, error) {
	r := l.r
	for {
		if r.err != nil {
			return nil, r.line, r.err
		}
		line, raw, n, tooLong, err := r.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			r.err = fmt.Errorf("read line %d: %w", r.line+1, err)
			return nil, r.line, r.err
		}
		if err != nil {
			r.err = io.EOF
			if raw == 0 {
				return nil, r.line, io.EOF
			}
		}
		r.line++
		r.stats.Lines++
		if tooLong {
			r.stats.Skipped.TooLong++
			return nil, r.line, &LineError{Line: r.line, Kind: TooLong, Length: n,
				Detail: tooLongDetail(n, r.opts.MaxLine)}
		}
		line = trimSpace(line)
		if len(line) == 0 {
			if r.err != nil {
				return nil, r.line, r.err
			}
			continue
		}
		return append([]byte(nil), line...), r.line, nil
	}
}
