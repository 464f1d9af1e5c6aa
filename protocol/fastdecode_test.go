// SPDX-License-Identifier: MIT

package protocol

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var fastSeeds = []string{
	`{"type":"output","text":"hello\n"}`,
	`{"type": "output", "text": "hello\n"}`,
	`{ "text" : "x" , "type" : "output" }`,
	`{"type":"log","level":"warn","message":"careful"}`,
	`{"type":"log","message":"no level"}`,
	`{"type":"output","text":"caf\u00e9 \u2028 \"q\" \\ \/ \b\f\r\t"}`,
	`{"type":"output","text":"café ☃ 🎉"}`,
	`{"type":"output","text":""}`,
	`{"type":"output","text":"a","message":"ignored","level":"x"}`,
	`{"type":"log","message":"m","text":"ignored"}`,
	// everything below must fall back to encoding/json
	`{"type":"output","text":"a","text":"b"}`,
	`{"Type":"output","text":"a"}`,
	`{"type":"output","TEXT":"a"}`,
	`{"type":"output","text":"\ud83c\udf89"}`,
	`{"type":"output","text":"\ud83c"}`,
	`{"type":"output","text":"bad` + "\xff" + `"}`,
	`{"type":"output","text":"ctl` + "\x01" + `"}`,
	`{"type":"output","text":5}`,
	`{"type":"output","text":null}`,
	`{"type":"output"}`,
	`{"type":"log","level":"info"}`,
	`{"type":"progress","message":"m"}`,
	`{"type":"exec","id":"1","command":"true"}`,
	`{"type":"output","text":"a"} `,
	`{"type":"output","text":"a"}x`,
	`{"type":"output","text":"a",}`,
	`{"type":"output","text":"\x"}`,
	`{"type":"output","extra":"a","text":"b"}`,
	`{}`,
	`{"type":"output","text":"a"`,
}

// The fast path must agree with encoding/json on every line it accepts.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := decodeFast(line)
		if !ok {
			return
		}
		want, lerr := decodeJSON(line, false)
		require.Nil(t, lerr, "fast path accepted %q, encoding/json skipped it: %v", line, lerr)
		require.Equal(t, want, got, "line %q", line)
	})
}

func TestDecodeFast(t *testing.T) {
	for i, s := range fastSeeds {
		got, ok := decodeFast([]byte(s))
		want, lerr := decodeJSON([]byte(s), false)
		if i < 10 {
			assert.True(t, ok, "the fast path should take %s", s)
			require.Nil(t, lerr, s)
			assert.Equal(t, want, got, s)
		} else {
			assert.False(t, ok, "the fast path must leave %s to encoding/json", s)
		}
	}
	// What the SDK and Python's json.dumps write is taken by the fast path.
	for _, v := range []any{Output{Text: "line\n\t\"x\" é"}, Log{Level: "info", Message: "m"}} {
		b, err := Encode(v)
		require.NoError(t, err)
		_, ok := decodeFast(b[:len(b)-1])
		assert.True(t, ok, "%s", b)
	}
}

// Through the Reader, a fast-path line and its encoding/json twin give the same message.
func TestReaderFastPathAgrees(t *testing.T) {
	in := `{"type":"output","text":"a\n"}` + "\n" + `{"type":"output","text":"a\n","text":"a\n"}` + "\n"
	r := NewReader(strings.NewReader(in), ReaderOptions{})
	var msgs []*Message
	for {
		m, err := r.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	require.Len(t, msgs, 2)
	assert.Equal(t, msgs[0].Output, msgs[1].Output)
	var direct Output
	require.NoError(t, json.Unmarshal([]byte(`{"type":"output","text":"a\n"}`), &direct))
	assert.Equal(t, direct.Text, msgs[0].Output.Text)
}
