// SPDX-License-Identifier: MIT

package egress

import (
	"bytes"
	"strconv"
)

// StreamChecker holds a byte stream of HTTP/1 requests (a program's connection that Go's
// HTTP server reads for fledge) to the strict reading of ParseRequestHead: every head must
// parse, with one framing only, and each body is followed by its framing (Content-Length
// bytes, or chunks) so the next head is found where a server finds it. Go's server is more
// lenient (it folds obsolete continuation lines, takes chunked over a Content-Length): the
// checker refuses such a request before Go's server acts on it. It is fed the bytes as they
// are read, in order; after a WebSocket upgrade's head it checks nothing more (the rest is
// the upgraded protocol).
type StreamChecker struct {
	state     streamState
	head      []byte
	line      []byte
	remaining int64
	progress  HeadProgress
	// Last is the last request head accepted (for records).
	Last *Request
	err  error
}

type streamState int

const (
	stHead streamState = iota
	stBody
	stChunkSize
	stChunkData
	stChunkEnd
	stTrailer
	stRaw
)

// Feed checks the next bytes of the stream; an error (a *RequestError) refuses the stream
// from here on.
func (s *StreamChecker) Feed(p []byte) error {
	for len(p) > 0 && s.err == nil {
		switch s.state {
		case stRaw:
			return nil
		case stHead:
			s.head = append(s.head, p...)
			p = nil
			if !s.progress.Due(s.head, MaxRequestHead) {
				continue
			}
			r, err := ParseRequestHead(s.head, MaxRequestHead)
			switch {
			case err == ErrIncomplete:
				continue
			case err == ErrNotHTTP:
				s.err = badRequest("not an HTTP/1 request")
				continue
			case err != nil:
				s.err = err
				continue
			}
			s.Last = r
			rest := s.head[r.Consumed:]
			s.head = nil
			s.progress.Reset()
			switch {
			case r.Upgrade || r.Connect():
				s.state = stRaw
			case r.Chunked:
				s.state = stChunkSize
			case r.ContentLength > 0:
				s.state, s.remaining = stBody, r.ContentLength
			}
			p = append([]byte(nil), rest...)
		case stBody, stChunkData:
			n := int64(len(p))
			if n > s.remaining {
				n = s.remaining
			}
			s.remaining -= n
			p = p[n:]
			if s.remaining == 0 {
				if s.state == stBody {
					s.state = stHead
				} else {
					s.state = stChunkEnd
				}
			}
		case stChunkSize, stChunkEnd, stTrailer:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.line = append(s.line, p...)
				p = nil
				if len(s.line) > maxChunkLine {
					s.err = badRequest("a chunk or trailer line over " + strconv.Itoa(maxChunkLine) + " bytes")
				}
				continue
			}
			line := append(s.line, p[:i]...)
			s.line = nil
			p = p[i+1:]
			line = bytes.TrimSuffix(line, []byte("\r"))
			if bytes.IndexByte(line, '\r') >= 0 {
				s.err = badRequest("a bare CR in a chunk or trailer line")
				continue
			}
			s.err = s.chunkLine(line)
		}
	}
	return s.err
}

func (s *StreamChecker) chunkLine(line []byte) error {
	switch s.state {
	case stChunkEnd:
		if len(line) != 0 {
			return badRequest("chunk data longer than its size")
		}
		s.state = stChunkSize
	case stChunkSize:
		n, err := chunkSize(line)
		if err != nil {
			return err
		}
		if n == 0 {
			s.state = stTrailer
			return nil
		}
		s.state, s.remaining = stChunkData, int64(n)
	case stTrailer:
		if len(line) == 0 {
			s.state = stHead
			return nil
		}
		return checkTrailer(line)
	}
	return nil
}
