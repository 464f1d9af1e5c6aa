// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./protocol -update to create it")
	assert.Equal(t, string(want), string(got))
}

func TestGoldenEncoding(t *testing.T) {
	tests := []struct {
		name string
		msgs []any
	}{
		{"init", []any{
			Init{Protocol: Version, Command: "deploy", Args: []string{"staging", "--dry-run"},
				Project: &Project{Name: "my-app", Root: "/home/dev/my-app", Language: "go",
					Git: &GitInfo{Branch: "main", Remote: "origin", RemoteURL: "https://github.com/org/my-app"}},
				Plugin:       PluginInfo{Name: "fledge-deploy", Version: "0.1.0", Dir: "/home/dev/.config/fledge/plugins/fledge-deploy"},
				Fledge:       FledgeInfo{Version: "0.1.0"},
				Capabilities: Capabilities{Exec: true, Store: true, Filesystem: "project"},
				Sandbox:      &SandboxInfo{Confinement: "landlock", LandlockABI: 7, Cgroup: "hybrid", Filesystem: "project"}},
			Init{Protocol: Version, Plugin: PluginInfo{Name: "p", Version: "1", Dir: "/p"}, Capabilities: Capabilities{Filesystem: "none"}},
		}},
		{"response", []any{
			NewResponse(ID(`"1"`), "production <&> ok"),
			NewResponse(ID(`2`), true),
			NewResponse(ID(`"3"`), []string{"us-east-1", "eu-west-1"}),
			NewResponse(ID(`"5"`), nil),
			NewResponse(ID(`"7"`), map[string]any{"git_tags": []string{"v1"}, "unknown": nil}),
			Response{ID: ID(`"8"`), Value: "type filled in"},
		}},
		{"cancel", []any{
			NewCancel(nil, CancelUserInterrupt),
			NewCancel(ID(`"4"`), CancelTimeout),
			NewCancel(ID(`9`), CancelNonInteractive),
			Cancel{Reason: CancelLimit},
		}},
		{"exec_result", []any{
			NewResponse(ID(`"6"`), ExecResult{Code: 0, Stdout: "v0.9.1\nv0.9.0\n", Stderr: ""}),
			NewResponse(ID(`"6"`), ExecResult{Code: 124, Stdout: "partial", Stderr: "killed", TimedOut: true, Reason: "timeout"}),
			NewResponse(ID(`"6"`), ExecResult{Code: 1, Stdout: "bin\xff\xfe\x00ary\u2028", Stderr: "\x1b[31mred\x1b[0m\n", StdoutTruncated: true}),
			NewResponse(ID(`"6"`), ExecResult{Code: 126, Stderr: "exec capability not granted", Reason: "capability_not_granted"}),
		}},
		{"outbound", []any{
			Prompt{ID: ID(`"1"`), Message: "Deploy target:", Default: ptr("staging"), Validate: "non_empty"},
			Confirm{ID: ID(`"2"`), Message: "Sure?", Default: ptr(false)},
			Select{ID: ID(`"3"`), Message: "Env:", Options: []string{"dev", "prod"}, Default: ptr(1)},
			MultiSelect{ID: ID(`"4"`), Message: "Regions:", Options: []string{"a", "b"}, Defaults: []int{0}},
			Progress{Message: "Uploading", Current: ptr(3.0), Total: ptr(10.0)},
			Progress{Done: true},
			Log{Level: "warn", Message: "careful"},
			Output{Text: "Deployed\n"},
			Store{Key: "k", Value: "v"},
			Load{ID: ID(`"5"`), Key: "k"},
			Exec{ID: ID(`"6"`), Command: "git tag -l", Cwd: ".", Timeout: ptr(10.0)},
			Metadata{ID: ID(`"7"`), Keys: []string{"git_tags"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf)
			for _, m := range tt.msgs {
				require.NoError(t, w.Send(m))
			}
			golden(t, tt.name, buf.Bytes())
			for i, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
				assert.True(t, json.Valid([]byte(line)), "line %d: %s", i, line)
			}
		})
	}
}

// TestRoundTrip: what the Writer encodes, the Reader of the other side decodes to the same.
func TestRoundTrip(t *testing.T) {
	outbound := []*Message{
		{Type: TypePrompt, Prompt: &Prompt{ID: ID(`"1"`), Message: "m", Default: ptr("d"), Validate: "url"}},
		{Type: TypeConfirm, Confirm: &Confirm{ID: ID(`2`), Message: "m", Default: ptr(true)}},
		{Type: TypeSelect, Select: &Select{ID: ID(`"3"`), Message: "m", Options: []string{"a", "b"}, Default: ptr(1)}},
		{Type: TypeMultiSelect, MultiSelect: &MultiSelect{ID: ID(`"4"`), Message: "m", Options: []string{"a"}, Defaults: []int{0}}},
		{Type: TypeProgress, Progress: &Progress{Message: "p", Current: ptr(1.5), Total: ptr(3.0)}},
		{Type: TypeLog, Log: &Log{Level: "error", Message: "<b>&</b>"}},
		{Type: TypeOutput, Output: &Output{Text: "line\nnext\ttab \u2028"}},
		{Type: TypeStore, Store: &Store{Key: "k", Value: "v"}},
		{Type: TypeLoad, Load: &Load{ID: ID(`"5"`), Key: "k"}},
		{Type: TypeExec, Exec: &Exec{ID: ID(`"6"`), Command: "echo hi", Cwd: "sub", Timeout: ptr(2.5)}},
		{Type: TypeMetadata, Metadata: &Metadata{ID: ID(`"7"`), Keys: []string{"env"}}},
	}
	inbound := []*Message{
		{Type: TypeResponse, Response: &InboundResponse{ID: ID(`"1"`), Value: json.RawMessage(`{"code":0}`)}},
		{Type: TypeCancel, Cancel: &Cancel{Type: TypeCancel, ID: ID(`"1"`), Reason: "timeout"}},
		{Type: TypeCancel, Cancel: &Cancel{Type: TypeCancel, Reason: "user_interrupt"}},
		{Type: TypeInit, Init: &Init{Type: TypeInit, Protocol: Version, Args: []string{}, Capabilities: Capabilities{Filesystem: "none"}}},
	}
	for _, set := range []struct {
		inbound bool
		msgs    []*Message
	}{{false, outbound}, {true, inbound}} {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, m := range set.msgs {
			require.NoError(t, w.Send(m.Payload()))
		}
		r := NewReader(&buf, ReaderOptions{Inbound: set.inbound})
		for i, want := range set.msgs {
			got, err := r.Next()
			require.NoError(t, err)
			want.Line = i + 1
			assert.Equal(t, want, got)
			assert.Equal(t, want.RequestID(), got.RequestID())
		}
		_, err := r.Next()
		require.ErrorIs(t, err, io.EOF)
	}
}

// TestExecResultAnyBytes: whatever bytes a command prints, the response is exactly one line
// of valid UTF-8 JSON.
func TestExecResultAnyBytes(t *testing.T) {
	cases := [][]byte{
		{0xff, 0xfe, 0xfd},
		{0xc3},             // truncated 2-byte sequence
		{0xed, 0xa0, 0x80}, // UTF-16 surrogate encoded in UTF-8
		{0xf4, 0x90, 0x80, 0x80},
		[]byte("\n\r\n\x00\x1b[2J\u2028\u2029</script>"),
		[]byte(`"},"code":0,"x":"`),
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	cases = append(cases, all)
	for i, out := range cases {
		var buf bytes.Buffer
		require.NoError(t, NewWriter(&buf).Send(NewResponse(ID(`"x"`), ExecResult{Code: 1, Stdout: string(out), Stderr: string(out)})))
		line := buf.Bytes()
		require.Equal(t, 1, bytes.Count(line, []byte("\n")), "case %d", i)
		require.Equal(t, byte('\n'), line[len(line)-1])
		require.True(t, json.Valid(line), "case %d", i)
		require.True(t, utf8.Valid(line), "case %d", i)
		var back struct{ Value ExecResult }
		require.NoError(t, json.Unmarshal(line, &back))
		assert.Equal(t, string([]rune(string(out))), back.Value.Stdout, "each invalid byte becomes U+FFFD")
	}
}

func FuzzExecResultLine(f *testing.F) {
	f.Add([]byte("hello\n"))
	f.Add([]byte{0xff, 0x00, '\n', '"'})
	f.Fuzz(func(t *testing.T, out []byte) {
		line, err := Encode(NewResponse(ID(`"1"`), ExecResult{Stdout: string(out), Stderr: string(out)}))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(line, []byte("\n")) != 1 || !json.Valid(line) || !utf8.Valid(line) {
			t.Fatalf("not one valid line: %q", line)
		}
	})
}

func TestWriterRawInvalidUTF8(t *testing.T) {
	// Raw JSON passes through encoding/json uncoerced; the writer still emits valid UTF-8.
	var buf bytes.Buffer
	require.NoError(t, NewWriter(&buf).Send(NewResponse(ID("\"a\xffb\""), json.RawMessage("{\"k\" :\n \"\xfe\xfe\"}"))))
	assert.Equal(t, "{\"type\":\"response\",\"id\":\"a\uFFFDb\",\"value\":{\"k\":\"\uFFFD\uFFFD\"}}\n", buf.String())
}

func TestWriterErrors(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriterOptions(&buf, WriterOptions{MaxLine: 64})
	err := w.Send(Output{Text: strings.Repeat("x", 100)})
	require.ErrorIs(t, err, ErrLineTooLong)
	assert.Empty(t, buf.String(), "nothing written for a refused message")
	require.NoError(t, w.Send(Output{Text: "ok"}))

	require.ErrorIs(t, w.Send("just a string"), ErrNotObject)
	require.Error(t, w.Send(NewResponse(ID(`"1"`), func() {})))
	require.Error(t, w.Send(NewResponse(ID(`"1"`), json.RawMessage(`{bad`))))
	assert.Equal(t, "{\"type\":\"output\",\"text\":\"ok\"}\n", buf.String())

	boom := errors.New("pipe closed")
	fw := NewWriter(failWriter{boom})
	require.ErrorIs(t, fw.Send(Output{Text: "a"}), boom)
	err = fw.Send(Output{Text: "b"})
	require.ErrorIs(t, err, ErrWriterBroken)
	require.ErrorIs(t, err, boom)
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// recordingWriter records each Write call separately.
type recordingWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

func TestWriterConcurrentOneWritePerLine(t *testing.T) {
	rec := &recordingWriter{}
	w := NewWriter(rec)
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				text := strings.Repeat(strconv.Itoa(g), i%300)
				assert.NoError(t, w.Send(Output{Text: text}))
			}
		}()
	}
	wg.Wait()
	require.Len(t, rec.writes, goroutines*each)
	for _, p := range rec.writes {
		require.Equal(t, 1, bytes.Count(p, []byte("\n")))
		require.True(t, json.Valid(p), "%q", p)
	}
}
