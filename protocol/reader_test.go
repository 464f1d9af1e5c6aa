// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

func readOne(t *testing.T, line string, inbound bool) (*Message, error) {
	t.Helper()
	r := NewReader(strings.NewReader(line+"\n"), ReaderOptions{Inbound: inbound})
	m, err := r.Next()
	if err == nil {
		_, eof := r.Next()
		require.ErrorIs(t, eof, io.EOF)
	}
	return m, err
}

func TestReaderMessages(t *testing.T) {
	tests := []struct {
		name    string
		inbound bool
		line    string
		want    Message
	}{
		{"prompt full", false, `{"type":"prompt","id":"1","message":"Deploy target:","default":"staging","validate":"non_empty"}`,
			Message{Type: TypePrompt, Prompt: &Prompt{ID: ID(`"1"`), Message: "Deploy target:", Default: ptr("staging"), Validate: "non_empty"}}},
		{"prompt minimal numeric id", false, `{"type":"prompt","id":17,"message":""}`,
			Message{Type: TypePrompt, Prompt: &Prompt{ID: ID(`17`), Message: ""}}},
		{"prompt null default", false, `{"type":"prompt","id":"a","message":"m","default":null}`,
			Message{Type: TypePrompt, Prompt: &Prompt{ID: ID(`"a"`), Message: "m"}}},
		{"confirm", false, `{"type":"confirm","id":"2","message":"Deploy?","default":false}`,
			Message{Type: TypeConfirm, Confirm: &Confirm{ID: ID(`"2"`), Message: "Deploy?", Default: ptr(false)}}},
		{"select", false, `{"type":"select","id":"3","message":"Env:","options":["dev","staging","production"],"default":0}`,
			Message{Type: TypeSelect, Select: &Select{ID: ID(`"3"`), Message: "Env:", Options: []string{"dev", "staging", "production"}, Default: ptr(0)}}},
		{"multi_select", false, `{"type":"multi_select","id":"4","message":"Regions:","options":["a","b","c"],"defaults":[0,1]}`,
			Message{Type: TypeMultiSelect, MultiSelect: &MultiSelect{ID: ID(`"4"`), Message: "Regions:", Options: []string{"a", "b", "c"}, Defaults: []int{0, 1}}}},
		{"multi_select empty options", false, `{"type":"multi_select","id":"4","message":"R","options":[]}`,
			Message{Type: TypeMultiSelect, MultiSelect: &MultiSelect{ID: ID(`"4"`), Message: "R", Options: []string{}}}},
		{"progress bar", false, `{"type":"progress","message":"Uploading","current":3,"total":10}`,
			Message{Type: TypeProgress, Progress: &Progress{Message: "Uploading", Current: ptr(3.0), Total: ptr(10.0)}}},
		{"progress done", false, `{"type":"progress","done":true}`,
			Message{Type: TypeProgress, Progress: &Progress{Done: true}}},
		{"log", false, `{"type":"log","level":"warn","message":"No deploy config"}`,
			Message{Type: TypeLog, Log: &Log{Level: "warn", Message: "No deploy config"}}},
		{"log ignores wrong-typed unrelated key", false, `{"type":"log","level":"info","message":"x","options":5,"command":[1]}`,
			Message{Type: TypeLog, Log: &Log{Level: "info", Message: "x"}}},
		{"output", false, `{"type":"output","text":"Deployed\n"}`,
			Message{Type: TypeOutput, Output: &Output{Text: "Deployed\n"}}},
		{"output ignores id", false, `{"type":"output","id":{"x":1},"text":""}`,
			Message{Type: TypeOutput, Output: &Output{Text: ""}}},
		{"store", false, `{"type":"store","key":"last","value":"production"}`,
			Message{Type: TypeStore, Store: &Store{Key: "last", Value: "production"}}},
		{"load", false, `{"type":"load","id":"5","key":"last"}`,
			Message{Type: TypeLoad, Load: &Load{ID: ID(`"5"`), Key: "last"}}},
		{"exec", false, `{"type":"exec","id":"6","command":"git tag -l","cwd":".","timeout":10}`,
			Message{Type: TypeExec, Exec: &Exec{ID: ID(`"6"`), Command: "git tag -l", Cwd: ".", Timeout: ptr(10.0)}}},
		{"metadata", false, `{"type":"metadata","id":"7","keys":["git_tags","env"]}`,
			Message{Type: TypeMetadata, Metadata: &Metadata{ID: ID(`"7"`), Keys: []string{"git_tags", "env"}}}},
		{"id escapes kept raw", false, `{"type":"load","id":"a\u00e9\"b","key":"k"}`,
			Message{Type: TypeLoad, Load: &Load{ID: ID(`"a\u00e9\"b"`), Key: "k"}}},
		{"id float kept raw", false, `{"type":"load","id":1.50e3,"key":"k"}`,
			Message{Type: TypeLoad, Load: &Load{ID: ID(`1.50e3`), Key: "k"}}},
		{"whitespace around", false, " \t{\"type\":\"output\",\"text\":\"x\"}  \r",
			Message{Type: TypeOutput, Output: &Output{Text: "x"}}},
		{"response", true, `{"type":"response","id":"1","value":"production"}`,
			Message{Type: TypeResponse, Response: &InboundResponse{ID: ID(`"1"`), Value: json.RawMessage(`"production"`)}}},
		{"response object value", true, `{"type":"response","id":6,"value":{"code":0,"stdout":"v1\n","stderr":""}}`,
			Message{Type: TypeResponse, Response: &InboundResponse{ID: ID(`6`), Value: json.RawMessage(`{"code":0,"stdout":"v1\n","stderr":""}`)}}},
		{"response without value", true, `{"type":"response","id":"5"}`,
			Message{Type: TypeResponse, Response: &InboundResponse{ID: ID(`"5"`), Value: json.RawMessage(`null`)}}},
		{"cancel session", true, `{"type":"cancel","reason":"user_interrupt"}`,
			Message{Type: TypeCancel, Cancel: &Cancel{Type: TypeCancel, Reason: "user_interrupt"}}},
		{"cancel one", true, `{"type":"cancel","id":"1","reason":"timeout"}`,
			Message{Type: TypeCancel, Cancel: &Cancel{Type: TypeCancel, ID: ID(`"1"`), Reason: "timeout"}}},
		{"cancel null id", true, `{"type":"cancel","id":null,"reason":"timeout"}`,
			Message{Type: TypeCancel, Cancel: &Cancel{Type: TypeCancel, Reason: "timeout"}}},
		{"init", true, `{"type":"init","protocol":"fledge-v1","command":"deploy","args":["staging"],"project":null,"plugin":{"name":"p","version":"0.1.0","dir":"/p"},"fledge":{"version":"1"},"capabilities":{"exec":true,"store":false,"metadata":false,"network":false,"filesystem":"none"}}`,
			Message{Type: TypeInit, Init: &Init{Type: TypeInit, Protocol: Version, Command: "deploy", Args: []string{"staging"},
				Plugin: PluginInfo{Name: "p", Version: "0.1.0", Dir: "/p"}, Fledge: FledgeInfo{Version: "1"},
				Capabilities: Capabilities{Exec: true, Filesystem: "none"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := readOne(t, tt.line, tt.inbound)
			require.NoError(t, err)
			want := tt.want
			want.Line = 1
			assert.Equal(t, &want, m)
		})
	}
}

func TestReaderSkips(t *testing.T) {
	tests := []struct {
		name     string
		inbound  bool
		line     string
		kind     LineErrorKind
		typ      string
		id       ID
		contains string
	}{
		{"plain text", false, `hello world`, Malformed, "", nil, "malformed JSON: not a JSON object"},
		{"array", false, `[1,2]`, Malformed, "", nil, "not a JSON object"},
		{"truncated", false, `{"type":"log","message":"x"`, Malformed, "", nil, "malformed JSON: unexpected end"},
		{"trailing garbage", false, `{"type":"log","message":"x"} {}`, Malformed, "", nil, "after top-level value"},
		{"type not string", false, `{"type":5}`, Malformed, "", nil, `field "type": expected string, got number`},
		{"message wrong type", false, `{"type":"prompt","id":"1","message":5}`, Malformed, TypePrompt, ID(`"1"`), `field "message": expected string, got number`},
		{"options wrong type", false, `{"type":"select","id":"1","message":"m","options":"a"}`, Malformed, TypeSelect, ID(`"1"`), `"options"`},
		{"confirm default wrong type", false, `{"type":"confirm","id":"1","message":"m","default":"yes"}`, Malformed, TypeConfirm, ID(`"1"`), `field "default": expected boolean, got string`},
		{"prompt default wrong type", false, `{"type":"prompt","id":"1","message":"m","default":3}`, Malformed, TypePrompt, ID(`"1"`), `expected string, got number`},
		{"select default float", false, `{"type":"select","id":"1","message":"m","options":["a"],"default":0.5}`, Malformed, TypeSelect, ID(`"1"`), `integer index`},
		{"store value not string", false, `{"type":"store","key":"k","value":{"a":1}}`, Malformed, TypeStore, nil, `field "value": expected string, got object`},
		{"missing type", false, `{"message":"x"}`, UnknownType, "", nil, "no message type"},
		{"empty type", false, `{"type":"","message":"x"}`, UnknownType, "", nil, "no message type"},
		{"null type wrong-typed other", false, `{"type":null,"message":5}`, UnknownType, "", nil, "no message type"},
		{"unknown type", false, `{"type":"frobnicate"}`, UnknownType, "frobnicate", nil, `unknown message type "frobnicate"`},
		{"unknown type wrong-typed field", false, `{"type":"frob","message":5}`, UnknownType, "frob", nil, `unknown message type "frob"`},
		{"hostile type quoted", false, `{"type":"\u001b]0;pwned\u0007"}`, UnknownType, "\x1b]0;pwned\x07", nil, `"\x1b]0;pwned\a"`},
		// A wrong-direction message keeps its usable id, so the host can name it.
		{"response sent to host", false, `{"type":"response","id":"1","value":1}`, UnknownType, TypeResponse, ID(`"1"`), "unknown"},
		{"init sent to host", false, `{"type":"init","protocol":"fledge-v1"}`, UnknownType, TypeInit, nil, "unknown"},
		{"prompt sent to plugin", true, `{"type":"prompt","id":"1","message":"m"}`, UnknownType, TypePrompt, ID(`"1"`), "unknown"},
		{"missing id", false, `{"type":"prompt","message":"m"}`, MissingID, TypePrompt, nil, "id is missing"},
		{"null id", false, `{"type":"confirm","id":null,"message":"m"}`, MissingID, TypeConfirm, nil, "id is null"},
		{"empty id", false, `{"type":"load","id":"","key":"k"}`, MissingID, TypeLoad, nil, "empty string"},
		{"bool id", false, `{"type":"exec","id":true,"command":"ls"}`, MissingID, TypeExec, nil, "id is boolean"},
		{"object id", false, `{"type":"metadata","id":{"a":1},"keys":[]}`, MissingID, TypeMetadata, nil, "id is object"},
		{"huge id", false, `{"type":"load","id":"` + strings.Repeat("x", MaxIDLen) + `","key":"k"}`, MissingID, TypeLoad, nil, "longer than"},
		{"response without id", true, `{"type":"response","value":"x"}`, MissingID, TypeResponse, nil, "id is missing"},
		{"cancel with bad id", true, `{"type":"cancel","id":"","reason":"x"}`, MissingID, TypeCancel, nil, "empty string"},
		{"prompt without message", false, `{"type":"prompt","id":"1"}`, Invalid, TypePrompt, ID(`"1"`), "message is required"},
		{"confirm without message", false, `{"type":"confirm","id":"1"}`, Invalid, TypeConfirm, ID(`"1"`), "message is required"},
		{"select without options", false, `{"type":"select","id":"1","message":"m"}`, Invalid, TypeSelect, ID(`"1"`), "options are required"},
		{"select empty options", false, `{"type":"select","id":"1","message":"m","options":[]}`, Invalid, TypeSelect, ID(`"1"`), "must not be empty"},
		{"select default out of range", false, `{"type":"select","id":"1","message":"m","options":["a"],"default":1}`, Invalid, TypeSelect, ID(`"1"`), "out of range"},
		{"multi_select without options", false, `{"type":"multi_select","id":2,"message":"m"}`, Invalid, TypeMultiSelect, ID(`2`), "options are required"},
		{"multi_select default out of range", false, `{"type":"multi_select","id":2,"message":"m","options":["a"],"defaults":[-1]}`, Invalid, TypeMultiSelect, ID(`2`), "out of range"},
		{"log without message", false, `{"type":"log","level":"info"}`, Invalid, TypeLog, nil, "message is required"},
		{"output without text", false, `{"type":"output"}`, Invalid, TypeOutput, nil, "text is required"},
		{"store without key", false, `{"type":"store","value":"v"}`, Invalid, TypeStore, nil, "key is required"},
		{"store without value", false, `{"type":"store","key":"k"}`, Invalid, TypeStore, nil, "value is required"},
		{"load without key", false, `{"type":"load","id":"1"}`, Invalid, TypeLoad, ID(`"1"`), "key is required"},
		{"exec without command", false, `{"type":"exec","id":"6"}`, Invalid, TypeExec, ID(`"6"`), "command is required"},
		{"exec empty command", false, `{"type":"exec","id":"6","command":""}`, Invalid, TypeExec, ID(`"6"`), "command is required"},
		{"metadata without keys", false, `{"type":"metadata","id":"7"}`, Invalid, TypeMetadata, ID(`"7"`), "keys are required"},
		{"init without protocol", true, `{"type":"init","args":[]}`, Invalid, TypeInit, nil, "protocol is required"},
		{"init wrong field", true, `{"type":"init","protocol":"fledge-v1","args":"x"}`, Malformed, TypeInit, nil, `field "args": expected array`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := readOne(t, tt.line, tt.inbound)
			require.Nil(t, m)
			require.ErrorIs(t, err, ErrSkipped)
			var le *LineError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tt.kind, le.Kind, "kind (%s)", le)
			assert.Equal(t, tt.typ, le.Type)
			assert.Equal(t, tt.id, le.ID)
			assert.Equal(t, 1, le.Line)
			assert.Contains(t, le.Error(), tt.contains)
			assert.True(t, strings.HasPrefix(le.Error(), "line 1: skipped: "), le.Error())
		})
	}
}

func TestReaderStreamFraming(t *testing.T) {
	in := "\n   \n{\"type\":\"output\",\"text\":\"a\"}\r\n" +
		"garbage\n" +
		strings.Repeat("x", 200) + "\n" +
		"{\"type\":\"output\",\"text\":\"b\"}" // no trailing newline
	r := NewReader(strings.NewReader(in), ReaderOptions{MaxLine: 100})
	m, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, 3, m.Line)
	assert.Equal(t, "a", m.Output.Text)

	_, err = r.Next()
	var le *LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, Malformed, le.Kind)
	assert.Equal(t, 4, le.Line)

	_, err = r.Next()
	require.ErrorAs(t, err, &le)
	assert.Equal(t, TooLong, le.Kind)
	assert.Equal(t, 5, le.Line)
	assert.EqualValues(t, 200, le.Length)
	assert.Equal(t, "line 5: skipped: line too long (at least 200 bytes, limit 100)", le.Error())

	m, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, 6, m.Line)
	assert.Equal(t, "b", m.Output.Text)

	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF, "EOF is sticky")

	st := r.Stats()
	assert.EqualValues(t, 6, st.Lines)
	assert.EqualValues(t, 2, st.Messages)
	assert.Equal(t, SkipCounts{TooLong: 1, Malformed: 1}, st.Skipped)
	assert.EqualValues(t, 2, st.Skipped.Total())
	assert.EqualValues(t, len(in), st.BytesRead)
}

func TestReaderLineLimitBoundary(t *testing.T) {
	// A line of exactly MaxLine bytes is read, with "\n" or "\r\n"; one byte more is not.
	mk := func(n int) string {
		pad := n - len(`{"type":"output","text":""}`)
		return `{"type":"output","text":"` + strings.Repeat("y", pad) + `"}`
	}
	for _, size := range []int{100, 5000, 70000} { // below, around and above one bufio chunk
		for _, term := range []string{"\n", "\r\n", ""} {
			in := mk(size) + term + mk(size+1) + term
			if term == "" { // unterminated final line: only one line fits in the stream
				in = mk(size)
			}
			r := NewReader(strings.NewReader(in), ReaderOptions{MaxLine: size})
			m, err := r.Next()
			require.NoError(t, err, "size %d term %q", size, term)
			assert.Len(t, m.Output.Text, size-len(`{"type":"output","text":""}`))
			if term == "" {
				_, err = r.Next()
				require.ErrorIs(t, err, io.EOF)
				continue
			}
			_, err = r.Next()
			var le *LineError
			require.ErrorAs(t, err, &le, "size %d term %q", size, term)
			assert.Equal(t, TooLong, le.Kind)
			_, err = r.Next()
			require.ErrorIs(t, err, io.EOF)
		}
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	src := io.MultiReader(strings.NewReader("{\"type\":\"output\",\"text\":\"a\"}\n{\"type\""), iotest.ErrReader(boom))
	r := NewReader(src, ReaderOptions{})
	_, err := r.Next()
	require.NoError(t, err)
	_, err = r.Next()
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, ErrSkipped)
	assert.Contains(t, err.Error(), "read line 2")
	_, err = r.Next()
	require.ErrorIs(t, err, boom, "read errors are sticky")
}

func TestReaderEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "  \r\n\n"} {
		_, err := NewReader(strings.NewReader(in), ReaderOptions{}).Next()
		require.ErrorIs(t, err, io.EOF, "%q", in)
	}
}

func TestReaderOneByteAtATime(t *testing.T) {
	// Framing must not depend on how the pipe splits writes.
	in := `{"type":"log","level":"info","message":"a"}` + "\n" + strings.Repeat("z", 300) + "\n" + `{"type":"output","text":"b"}`
	r := NewReader(iotest.OneByteReader(strings.NewReader(in)), ReaderOptions{MaxLine: 64})
	m, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, "a", m.Log.Message)
	_, err = r.Next()
	require.ErrorIs(t, err, ErrSkipped)
	m, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, "b", m.Output.Text)
}

func TestReaderCopiesOutOfBuffer(t *testing.T) {
	// Messages must stay intact after the reader reuses its buffer for later lines.
	var b bytes.Buffer
	for i := 0; i < 2000; i++ {
		b.WriteString(`{"type":"exec","id":"` + strings.Repeat("i", i%50+1) + `","command":"cmd` + strings.Repeat("c", i%70) + `"}` + "\n")
	}
	r := NewReader(&b, ReaderOptions{})
	var got []*Message
	for {
		m, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, m)
	}
	require.Len(t, got, 2000)
	for i, m := range got {
		assert.Equal(t, `"`+strings.Repeat("i", i%50+1)+`"`, string(m.Exec.ID))
		assert.Equal(t, "cmd"+strings.Repeat("c", i%70), m.Exec.Command)
	}
}
