// SPDX-License-Identifier: MIT

package ui

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// gateWriter blocks every write until it is opened, like a terminal under XOFF or a full
// pipe.
type gateWriter struct {
	open    chan struct{}
	entered chan struct{}
	once    sync.Once
	buf     syncBuffer
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.buf.Write(p)
}

// TestProgressNeverWaitsForTerminal: with the terminal stuck in a write, Progress still
// returns, keeps only the latest update, and that update is shown once the terminal moves.
func TestProgressNeverWaitsForTerminal(t *testing.T) {
	g := &gateWriter{open: make(chan struct{}), entered: make(chan struct{})}
	u := New(Options{NonInteractive: true, Out: &syncBuffer{}, Err: g})
	logged := make(chan struct{})
	go func() {
		u.Log("p", "info", "stuck")
		close(logged)
	}()
	<-g.entered // the log write now holds the terminal
	returned := make(chan struct{})
	go func() {
		f := func(v float64) *float64 { return &v }
		for i := 0; i <= 100000; i++ {
			u.Progress("p", "Copying", f(float64(i)), f(100000), false)
		}
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(hangLimit):
		t.Fatal("Progress waited for a blocked terminal")
	}
	close(g.open)
	<-logged
	u.Close()
	assert.Equal(t, "[p] info: stuck\n[p] Copying 100000/100000 (100%)\n", g.buf.String(),
		"intermediate updates coalesced into the latest")
}

// TestProgressBarOnTerminal drives the progress bar and spinner on a real pty.
func TestProgressBarOnTerminal(t *testing.T) {
	s := newTermSession(t, Options{NonInteractive: true})
	u := s.ui
	f := func(v float64) *float64 { return &v }

	u.Progress("deploy", "Uploading \x1b]0;t\x07artifacts", f(3), f(10), false)
	s.waitFor("[deploy] Uploading artifacts 3/10")
	s.waitFor("30%")
	u.Progress("deploy", "Uploading artifacts", f(10), f(10), false)
	s.waitFor("10/10")
	s.waitFor("100%")

	s.mark = len(s.screen.String())
	u.Log("deploy", "warn", "disk almost full")
	s.waitFor("[deploy] warn: disk almost full")
	s.waitFor("10/10") // the bar comes back under the log line

	s.mark = len(s.screen.String())
	u.Progress("deploy", "Indexing", nil, nil, false)
	s.waitFor("[deploy] Indexing")

	s.mark = len(s.screen.String())
	u.Progress("deploy", "", nil, nil, true)
	u.Log("deploy", "info", "after done")
	s.waitFor("after done")
	after := s.screen.String()[s.mark:]
	// the spinner line was blanked (\r, spaces, \r) and nothing drawn again
	assert.Regexp(t, `^\r +\r\[deploy\] info: after done\r?\n$`, after)
	u.Output("out\n")
	assert.Equal(t, "out\n", s.stdout.String(), "stdout is not a terminal here: verbatim")
	assert.NotContains(t, s.screen.String(), "\x1b]0;t", "progress text sanitised")
}
