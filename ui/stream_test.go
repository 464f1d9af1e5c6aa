// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSanitizingWriterSplitSequences(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string
	}{
		{"plain", []string{"hello ", "world\n"}, "hello world\n"},
		{"colour kept across a split", []string{"a\x1b[3", "1mred\x1b[0m\n"}, "a\x1b[31mred\x1b[0m\n"},
		{"osc title split", []string{"x\x1b]0;pwn", "ed\x07y\n"}, "xy\n"},
		{"osc 52 clipboard split at ST", []string{"\x1b]52;c;Y3VybCBldmlsCg==\x1b", "\\ok\n"}, "ok\n"},
		{"cursor movement dropped", []string{"\x1b[2J\x1b[H", "clear\n"}, "clear\n"},
		{"utf-8 split", []string{"caf\xc3", "\xa9\n"}, "café\n"},
		{"crlf split", []string{"line\r", "\nnext\n"}, "line\nnext\n"},
		{"c1 csi split", []string{"a\xc2\x9b3", "1mb\n"}, "ab\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			w := NewSanitizingWriter(&out)
			for _, c := range tt.chunks {
				n, err := w.Write([]byte(c))
				require.NoError(t, err)
				assert.Equal(t, len(c), n)
			}
			require.NoError(t, w.Flush())
			assert.Equal(t, tt.want, out.String())
		})
	}
}

func TestSanitizingWriterIsLiveAndBounded(t *testing.T) {
	var out bytes.Buffer
	w := NewSanitizingWriter(&out)
	_, _ = w.Write([]byte("progress 10%"))
	assert.Equal(t, "progress 10%", out.String(), "text without a pending sequence is written at once")
	// An unterminated OSC is held, but never more than maxHeld.
	_, _ = w.Write([]byte("\x1b]0;"))
	for i := 0; i < maxHeld; i++ {
		_, _ = w.Write([]byte("a"))
	}
	assert.LessOrEqual(t, len(w.held), maxHeld)
	assert.NotContains(t, out.String(), "\x1b]")
}

func FuzzSanitizingWriter(f *testing.F) {
	f.Add([]byte("a\x1b[31mb\x1b]0;t\x07c"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		var out bytes.Buffer
		w := NewSanitizingWriter(&out)
		step := int(split%16) + 1
		for i := 0; i < len(data); i += step {
			_, _ = w.Write(data[i:min(i+step, len(data))])
		}
		_ = w.Flush()
		got := out.String()
		// Whatever the split, the output is what Sanitize allows: re-sanitising changes
		// nothing.
		assert.Equal(t, Sanitize(got), got)
	})
}
