// SPDX-License-Identifier: MIT

package egress

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
)

// maxChunkLine bounds a chunk-size line (extensions included) and each trailer line.
const maxChunkLine = 4096

// chunkWriteBuf gathers re-framed chunks into fewer writes.
const chunkWriteBuf = 8 << 10

// CopyChunked forwards one chunked request body from src to dst, re-framed: each chunk's
// size line without its extensions, its data, the trailer lines as sent, CRLF line ends.
// What the destination receives is exactly the body fledge framed, so the next request
// on the connection starts where fledge says it does. A malformed body is a *RequestError.
func CopyChunked(dst io.Writer, src *bufio.Reader) (int64, error) {
	// What is re-framed is gathered and written in one go while more of the body is
	// already read, and sent before fledge waits for the program: a write per chunk line
	// would cost a system call and a packet for every few bytes the program sends.
	bw := bufio.NewWriterSize(dst, chunkWriteBuf)
	var n int64
	write := func(b []byte) error {
		k, err := bw.Write(b)
		n += int64(k)
		return err
	}
	// lineReady sends what is gathered unless the next line has arrived already.
	lineReady := func() error {
		if b, _ := src.Peek(src.Buffered()); bytes.IndexByte(b, '\n') >= 0 {
			return nil
		}
		return bw.Flush()
	}
	for {
		if err := lineReady(); err != nil {
			return n, err
		}
		line, err := readLine(src)
		if err != nil {
			return n, err
		}
		size, perr := chunkSize(line)
		if perr != nil {
			return n, perr
		}
		if err := write(append(strconv.AppendUint(nil, size, 16), '\r', '\n')); err != nil {
			return n, err
		}
		if size == 0 {
			break
		}
		if size <= uint64(src.Buffered()) {
			data, _ := src.Peek(int(size))
			if err := write(data); err != nil {
				return n, err
			}
			_, _ = src.Discard(int(size))
		} else {
			if err := bw.Flush(); err != nil {
				return n, err
			}
			k, err := io.CopyN(dst, src, int64(size))
			n += k
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n, err
			}
		}
		if err := lineReady(); err != nil {
			return n, err
		}
		end, err := readLine(src)
		if err != nil {
			return n, err
		}
		if len(end) != 0 {
			return n, badRequest("chunk data longer than its size")
		}
		if err := write([]byte("\r\n")); err != nil {
			return n, err
		}
	}
	for i := 0; ; i++ {
		if err := lineReady(); err != nil {
			return n, err
		}
		line, err := readLine(src)
		if err != nil {
			return n, err
		}
		if len(line) == 0 {
			if err := write([]byte("\r\n")); err != nil {
				return n, err
			}
			return n, bw.Flush()
		}
		if i >= maxRequestHeaders {
			return n, badRequest("too many trailer lines")
		}
		if err := checkTrailer(line); err != nil {
			return n, err
		}
		if err := write(append(append([]byte(nil), line...), '\r', '\n')); err != nil {
			return n, err
		}
	}
}

// readLine reads one line (LF or CRLF end, not returned), bounded by maxChunkLine; a bare
// CR in it is refused.
func readLine(src *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := src.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxChunkLine {
			return nil, badRequest("a chunk or trailer line over " + strconv.Itoa(maxChunkLine) + " bytes")
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		break
	}
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, badRequest("a bare CR in a chunk or trailer line")
	}
	return line, nil
}

// chunkSize reads a chunk-size line (its extensions checked and dropped): 1 to 15 hex
// digits. One reading for the body fledge forwards and the stream it checks.
func chunkSize(line []byte) (uint64, error) {
	size := line
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		size = bytes.TrimRight(line[:i], " \t")
		for _, c := range line[i:] {
			if c < 0x20 && c != '\t' || c == 0x7f {
				return 0, badRequest("a control byte in a chunk extension")
			}
		}
	}
	if len(size) == 0 || len(size) > 15 {
		return 0, badRequest("a chunk size that is not 1 to 15 hex digits")
	}
	n, err := strconv.ParseUint(string(size), 16, 64)
	if err != nil {
		return 0, badRequest("a chunk size that is not hex")
	}
	return n, nil
}

// checkTrailer checks one trailer line: NAME: VALUE, no control byte in the value.
func checkTrailer(line []byte) error {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || !isToken(string(name)) {
		return badRequest("a trailer line that is not NAME: VALUE")
	}
	for _, c := range value {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return badRequest("a control byte in a trailer value")
		}
	}
	return nil
}
