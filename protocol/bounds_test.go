// SPDX-License-Identifier: MIT

package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repeatReader yields n copies of b without holding them: the test itself must not be what
// allocates the 50 MiB.
type repeatReader struct {
	b byte
	n int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	for i := range p {
		p[i] = r.b
	}
	r.n -= int64(len(p))
	return len(p), nil
}

func TestReaderHugeLineBoundedMemory(t *testing.T) {
	const huge = 50 << 20
	src := io.MultiReader(
		strings.NewReader(`{"type":"output","text":"before"}`+"\n"+`{"type":"output","text":"`),
		&repeatReader{b: 'x', n: huge},
		strings.NewReader("\"}\n"+`{"type":"log","level":"info","message":"after"}`+"\n"+`{"type":"exec","id":"9","command":"true"}`+"\n"),
	)
	r := NewReader(src, ReaderOptions{})

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	m, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, "before", m.Output.Text)
	_, err = r.Next()
	var le *LineError
	require.ErrorAs(t, err, &le)
	require.Equal(t, TooLong, le.Kind)
	require.Equal(t, 2, le.Line)
	require.Greater(t, le.Length, int64(huge))
	m, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, "after", m.Log.Message)
	m, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, "true", m.Exec.Command)
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)

	runtime.ReadMemStats(&after)
	// TotalAlloc counts every allocation, freed or not: the whole read of a 50 MiB line must
	// cost O(MaxLine + buffer), not O(line).
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d bytes while skipping a %d-byte line", allocated, huge)
	assert.Less(t, allocated, uint64(8<<20))
}

func TestWriterLargeExecResult(t *testing.T) {
	// The largest honest exec reply (2 x 10 MiB of output) fits under the default bound.
	out := strings.Repeat("a\"\n", (10<<20)/3)
	var buf bytes.Buffer
	require.NoError(t, NewWriter(&buf).Send(NewResponse(ID(`"1"`), ExecResult{Stdout: out, Stderr: out})))
	require.Less(t, buf.Len(), DefaultMaxWriteLine)
	assert.True(t, json.Valid(buf.Bytes()))
}

// mixedStream returns n lines of the messages a busy plugin sends most.
func mixedStream(n int) []byte {
	lines := []string{
		`{"type":"output","text":"compiling package %d\n"}`,
		`{"type":"log","level":"info","message":"step %d done"}`,
		`{"type":"progress","message":"building","current":%d,"total":1000000}`,
		`{"type":"output","text":"line %d with \"quotes\" and \u00e9"}`,
	}
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, lines[i%len(lines)], i)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func BenchmarkReader(b *testing.B) {
	const n = 1_000_000
	data := mixedStream(n)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := NewReader(bytes.NewReader(data), ReaderOptions{})
		count := 0
		for {
			_, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			count++
		}
		if count != n {
			b.Fatalf("read %d messages, want %d", count, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkWriter(b *testing.B) {
	w := NewWriter(io.Discard)
	msg := Output{Text: "compiling package 42\n"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := w.Send(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
