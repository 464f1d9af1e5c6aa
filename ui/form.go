package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/huh/v2"
	"github.com/muesli/cancelreader"
)

// accessibleStopWait bounds how long a cancelled accessible prompt may take to notice that
// its input was cancelled before the question returns anyway.
const accessibleStopWait = 2 * time.Second

// runForm shows one field and waits for the answer, the user giving up (ErrAborted) or
// ctx ending (ctx.Err()). The form draws on stderr so stdout stays the plugin's output.
func (c *console) runForm(ctx context.Context, field huh.Field) error {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.beginQuestion()
	defer c.endQuestion()

	form := huh.NewForm(huh.NewGroup(field)).WithShowHelp(true)
	var err error
	if c.accessible {
		err = c.runAccessible(ctx, form)
	} else {
		// WithProgramOptions replaces huh's defaults, so it comes before WithInput/WithOutput.
		// Signals stay with the host: it turns SIGINT into a cancel and ends ctx.
		form = form.WithProgramOptions(tea.WithoutSignalHandler()).
			WithInput(c.in).
			WithOutput(c.formOutput())
		err = form.RunWithContext(ctx)
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil:
		return nil
	case errors.Is(err, huh.ErrUserAborted):
		return ErrAborted
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

// runAccessible runs the line-based form. huh cannot cancel it, so it reads through a
// cancelable reader: when ctx ends the read fails, the form returns, and nothing is left
// reading stdin behind the host's back.
func (c *console) runAccessible(ctx context.Context, form *huh.Form) error {
	cr, err := cancelreader.NewReader(c.in)
	if err != nil {
		return fmt.Errorf("ui: prompt input: %w", err)
	}
	defer func() { _ = cr.Close() }()
	in := &endReader{r: cr}
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
		cr.Cancel()
		select {
		case <-done:
		case <-time.After(accessibleStopWait):
		}
		return ctx.Err()
	}
}

// endReader notes whether its reader ever failed (EOF, cancel).
type endReader struct {
	r     io.Reader
	ended atomic.Bool
}

func (e *endReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.ended.Store(true)
	}
	return n, err
}
