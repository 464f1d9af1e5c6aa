// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tagged is stdout and stderr as one file (2>&1): what each write said, in order.
type tagged struct {
	mu     sync.Mutex
	writes []string
	all    bytes.Buffer
}

type taggedStream struct {
	t   *tagged
	tag string
}

func (s taggedStream) Write(p []byte) (int, error) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.t.writes = append(s.t.writes, s.tag+":"+string(p))
	s.t.all.Write(p)
	return len(p), nil
}

// Piped output held across the messages of one read is one write, and a log line or a
// warning in between writes what was held first: on one file the order is the plugin's.
func TestHoldKeepsOrderAndBatches(t *testing.T) {
	f := &tagged{}
	u := New(Options{NonInteractive: true, Out: taggedStream{f, "out"}, Err: taggedStream{f, "err"}})
	h, ok := u.(Holder)
	require.True(t, ok)

	r, release := HoldingReader(strings.NewReader("x"), u)
	_, err := r.Read(make([]byte, 1)) // what the read brought is handled while held
	require.NoError(t, err)
	u.Output("a\n")
	u.Output("b\n")
	assert.Empty(t, f.writes, "held while the read's messages are handled")
	u.Log("p", "info", "between")
	u.Output("c\n")
	u.Warn("host says")
	u.Output("d\n")
	release()
	h.Release() // idempotent
	assert.Equal(t, []string{"out:a\nb\n", "err:[p] info: between\n", "out:c\n", "err:fledge: warning: host says\n", "out:d\n"}, f.writes)
	assert.Equal(t, "a\nb\n[p] info: between\nc\nfledge: warning: host says\nd\n", f.all.String())
}

// Held output is bounded: past maxHeldPiped it is written, and nothing is lost.
func TestHoldBounded(t *testing.T) {
	f := &tagged{}
	u := New(Options{NonInteractive: true, Out: taggedStream{f, "out"}, Err: taggedStream{f, "err"}})
	h := u.(Holder)
	h.Hold()
	line := strings.Repeat("x", 1000) + "\n"
	var want strings.Builder
	for range 200 {
		u.Output(line)
		want.WriteString(line)
	}
	big := strings.Repeat("y", maxHeldPiped+1)
	u.Output(big)
	want.WriteString(big)
	u.Output("tail\n")
	want.WriteString("tail\n")
	f.mu.Lock()
	for _, w := range f.writes {
		assert.LessOrEqual(t, len(w), len("out:")+maxHeldPiped+1)
	}
	f.mu.Unlock()
	h.Release()
	assert.Equal(t, want.String(), f.all.String())
}

// A terminal shows output as it comes: never held.
func TestHoldNeverOnTerminal(t *testing.T) {
	f := &tagged{}
	u := New(Options{NonInteractive: true, Out: taggedStream{f, "out"}, Err: taggedStream{f, "err"}, TTYOut: true})
	u.(Holder).Hold()
	u.Output("shown\n")
	assert.Equal(t, []string{"out:shown\n"}, f.writes)
}

// The session's reader releases before each read of the plugin's pipe (which may wait).
func TestHoldingReaderReleasesBeforeRead(t *testing.T) {
	f := &tagged{}
	u := New(Options{NonInteractive: true, Out: taggedStream{f, "out"}, Err: taggedStream{f, "err"}})
	r, release := HoldingReader(strings.NewReader("ab"), u)
	defer release()
	buf := make([]byte, 1)
	_, _ = r.Read(buf)
	u.Output("first\n")
	assert.Empty(t, f.writes)
	_, _ = r.Read(buf)
	assert.Equal(t, []string{"out:first\n"}, f.writes, "written before the next read")
}

// stderr apart from stdout (another file, or the null device): its lines are held too, in
// their own buffer, and both are written on Release; the same file (2>&1): not apart, its
// lines keep their place among stdout's (TestHoldKeepsOrderAndBatches).
func TestHoldStderrApart(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	require.NoError(t, err)
	defer out.Close()
	errf, err := os.Create(filepath.Join(dir, "err"))
	require.NoError(t, err)
	defer errf.Close()
	u := New(Options{NonInteractive: true, Out: out, Err: errf})
	h := u.(Holder)
	h.Hold()
	u.Output("a\n")
	u.Log("p", "info", "between")
	u.Output("b\n")
	size := func(f *os.File) int64 {
		fi, err := f.Stat()
		require.NoError(t, err)
		return fi.Size()
	}
	assert.Zero(t, size(out), "stdout held")
	assert.Zero(t, size(errf), "stderr held: another file, no order to keep")
	h.Release()
	b, _ := os.ReadFile(out.Name())
	assert.Equal(t, "a\nb\n", string(b))
	b, _ = os.ReadFile(errf.Name())
	assert.Equal(t, "[p] info: between\n", string(b))

	// The same file twice (2>&1): not apart.
	dup, err := os.OpenFile(out.Name(), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer dup.Close()
	assert.False(t, apart(out, dup), "one file: the order between the two streams is visible")
	// The null device twice: apart (nothing to order).
	n1, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer n1.Close()
	n2, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer n2.Close()
	assert.True(t, apart(n1, n2))
	assert.False(t, apart(&bytes.Buffer{}, n2), "not files: cannot tell, not apart")
}
