// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamString encodes b with the StreamEncoder into a full line.
func streamLine(t testing.TB, fn func(e *StreamEncoder)) []byte {
	var out bytes.Buffer
	w := NewWriter(&out)
	require.NoError(t, w.SendStream(fn))
	return out.Bytes()
}

func TestStreamStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", "a\x00\b\f\n\r\t\x1b\x7f<>&\"\\", "caf\xc3\xa9", "\xff\xfe", "\u2028\u2029",
		"\xe2\x82", "emoji 😀", "\xed\xa0\x80", // a UTF-16 surrogate encoded in UTF-8 is invalid
	} {
		want, err := Encode(Output{Text: s})
		require.NoError(t, err)
		got := streamLine(t, func(e *StreamEncoder) {
			e.Raw(`{"type":"output","text":`)
			e.String([]byte(s))
			e.Raw(`}`)
		})
		assert.Equal(t, string(want), string(got), "%q", s)
	}
}

func FuzzStreamString(f *testing.F) {
	f.Add([]byte("a\x00\xff\u2028\"\\"))
	f.Fuzz(func(t *testing.T, b []byte) {
		want, err := Encode(Output{Text: string(b)})
		require.NoError(t, err)
		got := streamLine(t, func(e *StreamEncoder) {
			e.Raw(`{"type":"output","text":`)
			e.String(b)
			e.Raw(`}`)
		})
		require.Equal(t, string(want), string(got))
		require.True(t, json.Valid(bytes.TrimSpace(got)))
	})
}

func TestSendStreamBreaksOnError(t *testing.T) {
	w := NewWriter(&failWriter{err: assert.AnError})
	err := w.SendStream(func(e *StreamEncoder) { e.Raw(`{}`) })
	require.Error(t, err)
	assert.ErrorIs(t, w.Send(Output{Text: "x"}), ErrWriterBroken)
}
