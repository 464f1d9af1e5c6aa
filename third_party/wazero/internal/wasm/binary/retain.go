package binary

import (
	"bytes"
	"io"
)

// readBytes returns the next n bytes r reads: a copy, or, when src is what r reads (the
// binary is retained, experimental.WithBinaryRetained), the slice of src they are in, its
// capacity ending with them so that an append never writes into src. The errors are
// io.ReadFull's. (fledge patch)
func readBytes(r *bytes.Reader, src []byte, n int64) ([]byte, error) {
	if src == nil {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	switch left := int64(r.Len()); {
	case n > 0 && left == 0:
		return nil, io.EOF
	case n > left:
		_, _ = r.Seek(0, io.SeekEnd)
		return nil, io.ErrUnexpectedEOF
	}
	pos := int64(len(src)) - int64(r.Len())
	if _, err := r.Seek(n, io.SeekCurrent); err != nil {
		return nil, err
	}
	return src[pos : pos+n : pos+n], nil
}
