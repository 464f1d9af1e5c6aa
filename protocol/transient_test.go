// SPDX-License-Identifier: MIT

package protocol

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readAll reads every message of in, copying each (a transient one is valid only until the
// next Next), and the skipped lines' kinds.
func readAll(t *testing.T, in string, transient bool) (msgs []Message, outs []Output, logs []Log, skipped []LineErrorKind) {
	t.Helper()
	r := NewReader(strings.NewReader(in), ReaderOptions{MaxLine: 256, Transient: transient})
	for {
		m, err := r.Next()
		if err == io.EOF {
			return
		}
		var le *LineError
		if errors.As(err, &le) {
			skipped = append(skipped, le.Kind)
			continue
		}
		require.NoError(t, err)
		c := *m
		var o Output
		var l Log
		if m.Output != nil {
			o = Output{Text: strings.Clone(m.Output.Text)}
			c.Output = nil
		}
		if m.Log != nil {
			l = Log{Level: strings.Clone(m.Log.Level), Message: strings.Clone(m.Log.Message)}
			c.Log = nil
		}
		msgs, outs, logs = append(msgs, c), append(outs, o), append(logs, l)
	}
}

// TestReaderTransientAgrees: a transient Reader returns the same messages as a copying one,
// line for line, whatever mix of fast-path, encoding/json and skipped lines comes.
func TestReaderTransientAgrees(t *testing.T) {
	in := strings.Join(append(append([]string{}, fastSeeds...),
		`{"type":"log","level":"w\"a\"rn","message":"esc\\u00e9aped \"twice\""}`,
		`{"type":"output","text":"`+strings.Repeat(`\n`, 127)+`"}`,
		`{"type":"output","text":"`+strings.Repeat(`x`, 300)+`"}`,
		`{"type":"exec","id":"1","command":"true"}`,
		`{"type":"output","text":"after"}`,
	), "\n") + "\n"
	m1, o1, l1, s1 := readAll(t, in, false)
	m2, o2, l2, s2 := readAll(t, in, true)
	assert.Equal(t, m1, m2)
	assert.Equal(t, o1, o2)
	assert.Equal(t, l1, l2)
	assert.Equal(t, s1, s2)
	assert.NotEmpty(t, m1)
}

// TestReaderTransientScratchBounded: a long escaped string does not pin its scratch buffer
// past its own line.
func TestReaderTransientScratchBounded(t *testing.T) {
	big := `{"type":"output","text":"` + strings.Repeat(`\t`, 4*maxTransientScratch) + `"}`
	in := big + "\n" + `{"type":"output","text":"a\nb"}` + "\n"
	r := NewReader(strings.NewReader(in), ReaderOptions{Transient: true})
	m, err := r.Next()
	require.NoError(t, err)
	assert.Len(t, m.Output.Text, 4*maxTransientScratch)
	assert.Greater(t, cap(r.fast.scratch), maxTransientScratch)
	m, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, "a\nb", m.Output.Text)
	assert.LessOrEqual(t, cap(r.fast.scratch), maxTransientScratch)
}

// TestReaderTransientNoGarbage: output and log lines read by a transient Reader allocate
// nothing once its buffers are made.
func TestReaderTransientNoGarbage(t *testing.T) {
	line := `{"type":"output","text":"compiled module 01: ok\n"}` + "\n" +
		`{"type":"log","level":"info","message":"step 3 of the build finished"}` + "\n"
	src := &loopReader{line: []byte(line)}
	r := NewReader(src, ReaderOptions{Transient: true})
	for range 100 {
		_, err := r.Next()
		require.NoError(t, err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

// loopReader reads line over and over.
type loopReader struct {
	line []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.line[r.off:])
		n += c
		r.off = (r.off + c) % len(r.line)
	}
	return n, nil
}
