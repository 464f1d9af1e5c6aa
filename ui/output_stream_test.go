// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
)

var updateGolden = flag.Bool("update-output-golden", false, "rewrite testdata/output_stream_*.golden")

// outputStreamLineMax is the Reader's bound in the test: small, so lines at it and one past
// it are cheap to write.
const outputStreamLineMax = 8 << 10

// mixedStream is what a chatty plugin might send: output and log lines of every level,
// escapes and terminal sequences, invalid UTF-8, lines that take encoding/json's path, log
// messages past the shown bounds, and lines at and just past the Reader's bound.
func mixedStream() []byte {
	var b bytes.Buffer
	add := func(s string) { b.WriteString(s); b.WriteByte('\n') }
	add(`{"type":"output","text":"compiled module 01: ok\n"}`)
	add(`{"type":"log","level":"debug","message":"step 3 of the build finished"}`)
	add(`{"type":"log","level":"info","message":"multi\nline\n\nmessage\n"}`)
	add(`{"type":"log","level":"WARNING ","message":"fledge: warning: forged?"}`)
	add(`{"type":"log","level":"error","message":"red \u001b[31mtext\u001b[0m and a title \u001b]0;pwned\u0007 end"}`)
	add(`{"type":"log","level":"nonsense","message":"unknown level"}`)
	add(`{"type":"log","message":"no level at all"}`)
	add(`{"type":"output","text":"partial line, "}`)
	add(`{"type":"output","text":"then the rest\r\n"}`)
	add(`{"type":"output","text":"colour \u001b[1;32mgreen\u001b[0m, clear \u001b[2J, osc52 \u001b]52;c;cHduZWQ=\u0007, bidi \u202e reversed\n"}`)
	add(`{"type":"output","text":"c1 \u009b31m csi, bell \u0007, nul \u0000, del \u007f\n"}`)
	add(`{"type":"output","text":"caf\u00e9 \u2028 \"q\" \\ \/ \b\f\t 🎉\n"}`)
	add(`{"type":"output","text":"` + "raw \x1b[31mescape\x1b[0m and invalid \xff\xfe utf-8" + `\n"}`)
	add(`{"type":"log","level":"warn","message":"` + "invalid \xc3\x28 utf-8 in a log" + `"}`)
	add(`{"type":"output","text":"\ud83c\udf89 surrogates, via encoding/json\n"}`)
	add(`{"type":"output","text":"dup","text":"licate keys\n"}`)
	add(`{"type":"log","level":"info","message":"a","message":"dup message"}`)
	add(`{"type":"output","text":""}`)
	add(`{"type":"log","level":"info","message":""}`)
	add(`not json at all`)
	add(`{"type":"progress","message":"ignored here"}`)
	add(``)
	add(`   `)
	// A log message with a line past MaxLineBytes, and one with more than MaxShownLines lines.
	add(`{"type":"log","level":"info","message":"` + strings.Repeat("é", MaxLineBytes) + `"}`)
	add(`{"type":"log","level":"debug","message":"` + strings.Repeat("l\\n", MaxShownLines+5) + `"}`)
	// Lines exactly at the Reader's bound (escaped and not), then one byte past it.
	for _, fill := range []string{"x", `\n`, `\u001b[1m`} {
		head := `{"type":"output","text":"`
		tail := `"}`
		n := (outputStreamLineMax - len(head) - len(tail)) / len(fill)
		line := head + strings.Repeat(fill, n) + tail
		line += strings.Repeat(" ", outputStreamLineMax-len(line))
		add(line)
		add(line + " ")
	}
	head := `{"type":"log","level":"warn","message":"`
	add(head + strings.Repeat("w", outputStreamLineMax-len(head)-2) + `"}`)
	add(`{"type":"output","text":"done\n"}`)
	return b.Bytes()
}

// chunkReader returns at most n bytes per Read, so messages straddle reads (and holds).
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

// playStream feeds stream to u as the fledge-v1 host's read loop does (HoldingReader, a
// protocol.Reader, Output and Log), transient as the host reads it, or with every message
// copied.
func playStream(t *testing.T, u UI, stream []byte, transient bool) {
	t.Helper()
	r, release := HoldingReader(chunkReader{bytes.NewReader(stream), 777}, u)
	defer release()
	rd := protocol.NewReader(r, protocol.ReaderOptions{MaxLine: outputStreamLineMax, Transient: transient})
	for {
		m, err := rd.Next()
		if err == io.EOF {
			return
		}
		if errors.Is(err, protocol.ErrSkipped) {
			continue
		}
		require.NoError(t, err)
		switch {
		case m.Output != nil:
			u.Output(m.Output.Text)
		case m.Log != nil:
			u.Log("bench\x1b[31m\nplugin", m.Log.Level, m.Log.Message)
		default:
			if h, ok := u.(Holder); ok {
				h.Release()
			}
		}
	}
}

// outputCases are the shapes a user's stdout and stderr come in.
var outputCases = []struct {
	name string
	opts func(out, err *bytes.Buffer) Options
}{
	{"piped_apart", func(out, err *bytes.Buffer) Options { return Options{Out: out, Err: err} }},
	{"piped_one_file", func(out, _ *bytes.Buffer) Options { return Options{Out: out, Err: out} }},
	{"tty_color", func(out, err *bytes.Buffer) Options {
		on := true
		return Options{Out: out, Err: err, TTYOut: true, TTYErr: true, Color: &on}
	}},
	{"tty_no_color", func(out, err *bytes.Buffer) Options {
		off := false
		return Options{Out: out, Err: err, TTYOut: true, TTYErr: true, Color: &off}
	}},
	{"piped_out_tty_err", func(out, err *bytes.Buffer) Options {
		off := false
		return Options{Out: out, Err: err, TTYErr: true, Color: &off}
	}},
}

// TestOutputStreamByteForByte: what a mixed stream of plugin messages puts on stdout and
// stderr is the same, byte for byte, as it was before the output path stopped making
// garbage per message (the golden files were written by that code), and the same whether
// the Reader's messages are transient or copied.
func TestOutputStreamByteForByte(t *testing.T) {
	stream := mixedStream()
	for _, tc := range outputCases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]string
			for i, transient := range []bool{false, true} {
				var out, errb bytes.Buffer
				u := New(tc.opts(&out, &errb))
				playStream(t, u, stream, transient)
				u.Close()
				got[i] = fmt.Sprintf("--- stdout %d bytes\n%s\n--- stderr %d bytes\n%s\n", out.Len(), out.String(), errb.Len(), errb.String())
			}
			require.Equal(t, got[0], got[1], "transient and copied messages must print the same")
			golden := filepath.Join("testdata", "output_stream_"+tc.name+".golden")
			if *updateGolden {
				require.NoError(t, os.WriteFile(golden, []byte(got[0]), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), got[0])
		})
	}
}

// TestConsoleOutputNoGarbage: a plugin's output and log lines, piped or on a terminal,
// allocate nothing per line once the console's buffers are made (make bench, row 2b).
func TestConsoleOutputNoGarbage(t *testing.T) {
	on := true
	for _, opts := range []Options{
		{Out: io.Discard, Err: io.Discard},
		{Out: io.Discard, Err: io.Discard, TTYOut: true, TTYErr: true, Color: &on},
	} {
		u := New(opts)
		h := u.(Holder)
		play := func() {
			h.Hold()
			u.Output("compiled module 01: ok\n")
			u.Log("fledge-bench", "info", "step 3 of the build finished")
			u.Log("fledge-bench", "debug", "two\nlines")
			h.Release()
		}
		play()
		assert.Zero(t, testing.AllocsPerRun(200, play), "TTYOut %v", opts.TTYOut)
		u.Close()
	}
}

// TestHeldOutputIsCopied: output a terminal holds back while a question is open is shown as
// it was given, even when the caller reuses the buffer its text pointed into (a transient
// message: the next line of the plugin overwrites it).
func TestHeldOutputIsCopied(t *testing.T) {
	var out, errb bytes.Buffer
	off := false
	c := New(Options{Out: &out, Err: &errb, TTYOut: true, TTYErr: true, Color: &off}).(*console)
	buf := []byte("first line\n")
	c.beginQuestion()
	c.Output(unsafe.String(&buf[0], len(buf)))
	copy(buf, "\x1b]52;c;x\a\n") // the next message lands in the same buffer
	// Log lines held meanwhile are copies of the console's own reused line buffer.
	c.Log("p", "info", "one")
	c.Log("p", "info", "two")
	c.endQuestion("")
	c.Close()
	assert.Equal(t, "first line\n", out.String())
	assert.Equal(t, "[p] info: one\n[p] info: two\n", errb.String())
}
