// SPDX-License-Identifier: MIT

package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/huh/v2"
	"github.com/muesli/cancelreader"
	"golang.org/x/term"
)

// accessibleStopWait bounds how long a cancelled accessible prompt may take to notice that
// its input was cancelled before the question returns anyway.
const accessibleStopWait = 2 * time.Second

// runForm shows one field and waits for the answer, the user giving up (ErrAborted) or
// ctx ending (ctx.Err()). The form draws on stderr so stdout stays the plugin's output.
// echo, called only after a successful answer, gives the one line that stays on screen
// once the form is gone; it is written before anything held back during the question.
func (c *console) runForm(ctx context.Context, field huh.Field, echo func() string) (err error) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.beginQuestion()
	defer func() {
		line := ""
		if err == nil && echo != nil {
			line = echo()
		}
		c.endQuestion(line)
	}()

	form := huh.NewForm(huh.NewGroup(field)).WithShowHelp(true)
	if c.accessible {
		err = c.runAccessible(ctx, form)
	} else {
		err = c.runFullScreen(ctx, form)
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil:
		return nil
	case errors.Is(err, huh.ErrUserAborted):
		// The full-screen form reads keys raw, so Ctrl+C reaches it as a key instead of
		// SIGINT reaching fledge; it must still mean "interrupt", not "skip this question".
		return ErrInterrupted
	default:
		return fmt.Errorf("ui: prompt: %w", err)
	}
}

// formOutput is stderr, as the file itself when it is one: the form library needs the
// terminal to size and drive it.
func (c *console) formOutput() io.Writer {
	if c.errFile != nil {
		return c.errFile
	}
	return c.err
}

// runFullScreen runs the arrow-key form. The form library would read the terminal
// itself, but after it returns its reader can stay blocked in the terminal and later steal
// a keystroke meant for the next question; so it reads through questionInput, which is
// stopped for good before the question returns, and fledge sets raw mode itself.
func (c *console) runFullScreen(ctx context.Context, form *huh.Form) error {
	fd := int(c.in.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return fmt.Errorf("ui: terminal raw mode: %w", err)
	}
	defer func() { _ = term.Restore(fd, old) }()
	if err := keepOutputProcessing(fd); err != nil {
		return fmt.Errorf("ui: terminal output mode: %w", err)
	}
	in, err := newQuestionInput(c.in)
	if err != nil {
		return err
	}
	defer in.stop()
	// WithProgramOptions replaces huh's defaults, so it comes before WithInput/WithOutput.
	// Signals stay with the host: it turns SIGINT into a cancel and ends ctx.
	form = form.WithProgramOptions(tea.WithoutSignalHandler()).
		WithInput(in).
		WithOutput(c.formOutput())
	return form.RunWithContext(ctx)
}

// runAccessible runs the line-based form. huh cannot cancel it, so it reads through a
// questionInput: when ctx ends the read fails, the form returns, and nothing is left
// reading stdin behind the host's back.
func (c *console) runAccessible(ctx context.Context, form *huh.Form) error {
	in, err := newQuestionInput(c.in)
	if err != nil {
		return err
	}
	defer in.stop()
	form = form.WithAccessible(true).WithInput(in).WithOutput(c.formOutput())

	done := make(chan error, 1)
	go func() {
		defer func() {
			// huh's accessible select indexes option -1 when input ends with no default;
			// input ended, so that is the user giving up, not a crash of fledge.
			if r := recover(); r != nil {
				done <- ErrAborted
			}
		}()
		done <- form.RunWithContext(ctx)
	}()
	select {
	case err := <-done:
		if in.ended.Load() {
			return ErrAborted // end of input is not an answer, even if huh took a default
		}
		return err
	case <-ctx.Done():
		in.cancel()
		select {
		case <-done:
		case <-time.After(accessibleStopWait):
		}
		return ctx.Err()
	}
}

// questionInput is the terminal as one question reads it: cancelable, and once stopped,
// guaranteed to have no read in flight and to read nothing more.
type questionInput struct {
	cr     cancelreader.CancelReader
	mu     sync.RWMutex // read-held during a read; stop takes it to wait reads out
	closed bool
	ended  atomic.Bool // a read failed: end of input or cancelled
}

func newQuestionInput(f *os.File) (*questionInput, error) {
	cr, err := cancelreader.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("ui: prompt input: %w", err)
	}
	return &questionInput{cr: cr}, nil
}

func (q *questionInput) Read(p []byte) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return 0, io.EOF
	}
	n, err := q.cr.Read(p)
	if err != nil {
		q.ended.Store(true)
	}
	return n, err
}

// cancel makes a pending and every later read fail.
func (q *questionInput) cancel() { q.cr.Cancel() }

// stop cancels, waits for any read in flight to return, and releases the reader.
func (q *questionInput) stop() {
	q.cr.Cancel()
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	_ = q.cr.Close()
}
