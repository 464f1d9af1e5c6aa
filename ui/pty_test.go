// SPDX-License-Identifier: MIT

package ui

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// hangLimit only catches a hung test; nothing here measures speed.
const hangLimit = 30 * time.Second

const (
	keyUp    = "\x1b[A"
	keyDown  = "\x1b[B"
	keyLeft  = "\x1b[D"
	keyEnter = "\r"
)

// termSession is a real pseudo-terminal: the UI gets the tty side as stdin and stderr,
// the test plays the user on the master side and reads back what was drawn.
type termSession struct {
	t      *testing.T
	ptmx   *os.File
	tty    *os.File
	screen *syncBuffer
	stdout *syncBuffer
	ui     UI
	mark   int // screen offset where the current question's output starts
}

func newTermSession(t *testing.T, opts Options) *termSession {
	t.Helper()
	return newTermSessionOut(t, opts, false)
}

// newTermSessionOut is newTermSession with stdout on the terminal too when sameScreen.
func newTermSessionOut(t *testing.T, opts Options, sameScreen bool) *termSession {
	t.Helper()
	// the environment must not pick the mode behind the test's back (TERM=dumb and
	// ACCESSIBLE switch to accessible prompts)
	t.Setenv("TERM", "xterm-256color")
	t.Setenv("ACCESSIBLE", "")
	ptmx, tty, err := pty.Open()
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "no pseudo-terminal: "+err.Error())
	}
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 100}))
	s := &termSession{t: t, ptmx: ptmx, tty: tty, screen: &syncBuffer{}, stdout: &syncBuffer{}}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(s.screen, ptmx)
	}()
	opts.In, opts.Err, opts.Out = tty, tty, s.stdout
	if sameScreen {
		opts.Out = tty
	}
	if opts.Color == nil {
		opts.Color = ptr(false)
	}
	s.ui = New(opts)
	t.Cleanup(func() {
		s.ui.Close()
		_ = tty.Close()
		_ = ptmx.Close()
		<-copied
	})
	require.Equal(t, !opts.NonInteractive, s.ui.Interactive(), "stdin is a terminal")
	return s
}

// waitFor waits until text has been drawn since the current mark.
func (s *termSession) waitFor(text string) {
	s.t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !strings.Contains(s.screen.String()[s.mark:], text) {
		if time.Now().After(deadline) {
			s.t.Fatalf("%q never appeared on the terminal; screen since mark:\n%q", text, s.screen.String()[s.mark:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitShows waits until text has been on one line of the screen since the mark: unlike
// waitFor it sees text drawn in pieces (a hint redrawn once the terminal's width is known).
func (s *termSession) waitShows(text string) {
	s.t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !screenEverShows(s.screen.String()[s.mark:], text) {
		if time.Now().After(deadline) {
			s.t.Fatalf("%q never showed on the terminal; screen since mark:\n%q", text, s.screen.String()[s.mark:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// press sends keys one at a time, the way a person types them; a func runs in between.
func (s *termSession) press(keys ...any) {
	s.t.Helper()
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			_, err := s.ptmx.Write([]byte(k))
			require.NoError(s.t, err)
		case func():
			k()
		default:
			s.t.Fatalf("press: %T", k)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// ask runs a question in the background, waits for its title, types keys and returns
// the answer.
func ask[T any](s *termSession, title string, q func(context.Context) (T, error), keys ...any) (T, error) {
	s.t.Helper()
	s.mark = len(s.screen.String())
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := q(context.Background())
		done <- result{v, err}
	}()
	s.waitFor(title)
	s.press(keys...)
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(hangLimit):
		s.t.Fatalf("question %q never returned; screen:\n%q", title, s.screen.String()[s.mark:])
		panic("unreachable")
	}
}

func TestInteractivePTY(t *testing.T) {
	s := newTermSession(t, Options{})
	u := s.ui

	t.Run("prompt default shown, typed text replaces it", func(t *testing.T) {
		got, err := ask(s, "Greet whom", func(ctx context.Context) (string, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "deploy", Message: "Greet whom?", Default: ptr("world")})
		}, func() {
			// A person types once the hint is there; the first frame can come before the
			// terminal's width is known and show only its first letter (seen in CI).
			s.waitShows("> world")
		}, "B", "o", "b", keyEnter)
		require.NoError(t, err)
		assert.Equal(t, "Bob", got, "the default is a hint, not text to append to")
		drawn := s.screen.String()[s.mark:]
		assert.Contains(t, drawn, "[deploy]")
		assert.True(t, screenEverShows(drawn, "> world"), "the default is shown as a hint: %q", drawn)
	})

	t.Run("prompt enter alone takes the default", func(t *testing.T) {
		got, err := ask(s, "Deploy target", func(ctx context.Context) (string, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "deploy", Message: "Deploy target:", Default: ptr("staging")})
		}, keyEnter)
		require.NoError(t, err)
		assert.Equal(t, "staging", got)
		assert.Contains(t, strings.Join(renderScreen(s.screen.String()[s.mark:]), "\n"), "Deploy target: staging", "the answer, the default, is on the screen")
	})

	t.Run("prompt validator rejects then accepts", func(t *testing.T) {
		got, err := ask(s, "How many", func(ctx context.Context) (string, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "How many?", Validate: ValidateInteger})
		}, "a", "b", keyEnter, "\x7f", "\x7f", "4", "2", keyEnter)
		require.NoError(t, err)
		assert.Equal(t, "42", got)
		assert.Contains(t, s.screen.String()[s.mark:], "not an integer")
	})

	t.Run("prompt message sanitised on screen", func(t *testing.T) {
		got, err := ask(s, "Name", func(ctx context.Context) (string, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "\x1b]0;pwned\x07\x1b]52;c;QUFB\x07Name?"})
		}, "x", keyEnter)
		require.NoError(t, err)
		assert.Equal(t, "x", got)
		drawn := s.screen.String()[s.mark:]
		assert.NotContains(t, drawn, "pwned")
		assert.NotContains(t, drawn, "52;c;")
	})

	t.Run("confirm toggled with arrow", func(t *testing.T) {
		got, err := ask(s, "Really deploy", func(ctx context.Context) (bool, error) {
			return u.Confirm(ctx, "deploy", "Really deploy?", nil)
		}, keyLeft, keyEnter)
		require.NoError(t, err)
		assert.True(t, got)
	})

	t.Run("confirm default kept with enter", func(t *testing.T) {
		got, err := ask(s, "Keep going", func(ctx context.Context) (bool, error) {
			return u.Confirm(ctx, "deploy", "Keep going?", ptr(true))
		}, keyEnter)
		require.NoError(t, err)
		assert.True(t, got)
	})

	t.Run("select arrow down and enter", func(t *testing.T) {
		got, err := ask(s, "Environment", func(ctx context.Context) (int, error) {
			return u.Select(ctx, "deploy", "Environment?", []string{"staging", "production", "dev"}, nil)
		}, keyDown, keyEnter)
		require.NoError(t, err)
		assert.Equal(t, 1, got)
	})

	t.Run("select starts on the default", func(t *testing.T) {
		got, err := ask(s, "Region", func(ctx context.Context) (int, error) {
			return u.Select(ctx, "deploy", "Region?", []string{"eu", "us", "ap", "sa"}, ptr(2))
		}, keyDown, keyEnter)
		require.NoError(t, err)
		assert.Equal(t, 3, got)
	})

	t.Run("multi_select defaults, arrow, space, enter", func(t *testing.T) {
		got, err := ask(s, "Regions to deploy", func(ctx context.Context) ([]int, error) {
			return u.MultiSelect(ctx, "deploy", "Regions to deploy:", []string{"eu", "us", "ap"}, []int{2})
		}, keyUp, " ", keyEnter)
		require.NoError(t, err)
		assert.Equal(t, []int{1, 2}, got)
	})

	t.Run("ctrl+c aborts", func(t *testing.T) {
		_, err := ask(s, "Abort me", func(ctx context.Context) (string, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Abort me"})
		}, "\x03")
		require.ErrorIs(t, err, ErrInterrupted, "Ctrl+C interrupts the session, not only the question")
		require.ErrorIs(t, err, ErrAborted)
	})

	t.Run("logs wait while the question is on screen", func(t *testing.T) {
		got, err := ask(s, "Hold logs", func(ctx context.Context) (string, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Hold logs"})
		}, "a", func() { u.Log("p", "info", "held while asking") }, "b", keyEnter)
		require.NoError(t, err)
		assert.Equal(t, "ab", got)
		drawn := s.screen.String()[s.mark:]
		logAt := strings.Index(drawn, "[p] info: held while asking")
		require.GreaterOrEqual(t, logAt, 0, "held log written after the question")
		assert.Greater(t, logAt, strings.LastIndex(drawn, "Hold logs"), "log came after the form's last frame")
	})

	assert.Empty(t, s.stdout.String(), "the form never draws on stdout")
	assertCooked(t, s.tty)
}

// assertCooked checks the terminal was handed back in its normal line mode.
func assertCooked(t *testing.T, tty *os.File) {
	t.Helper()
	cooked, err := isCooked(tty)
	require.NoError(t, err)
	assert.True(t, cooked, "terminal left in raw mode")
}

func TestInteractiveContextTimeout(t *testing.T) {
	for _, accessible := range []bool{false, true} {
		name := "form"
		if accessible {
			name = "accessible"
		}
		t.Run(name, func(t *testing.T) {
			s := newTermSession(t, Options{Accessible: accessible})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := s.ui.Select(ctx, "p", "Pick one (nobody will)", []string{"a", "b"}, nil)
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(hangLimit):
				t.Fatal("pending prompt did not return after its context ended")
			}
			// nothing is left reading the terminal: the next question gets the next answer
			var got string
			var err error
			if accessible {
				got, err = ask(s, "Next question", func(ctx context.Context) (string, error) {
					return s.ui.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Next question"})
				}, "next\n")
			} else {
				got, err = ask(s, "Next question", func(ctx context.Context) (string, error) {
					return s.ui.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Next question"})
				}, "n", "e", "x", "t", keyEnter)
			}
			require.NoError(t, err)
			assert.Equal(t, "next", got)
			assertCooked(t, s.tty)
		})
	}
}

func TestAccessiblePTY(t *testing.T) {
	s := newTermSession(t, Options{Accessible: true})
	u := s.ui

	got, err := ask(s, "Deploy target", func(ctx context.Context) (string, error) {
		return u.Prompt(ctx, PromptRequest{Plugin: "deploy", Message: "Deploy target:", Default: ptr("staging")})
	}, "\n")
	require.NoError(t, err)
	assert.Equal(t, "staging", got, "empty line takes the default")
	assert.Contains(t, s.screen.String()[s.mark:], "Deploy target: [staging]", "the default is shown")

	got, err = ask(s, "Greet whom", func(ctx context.Context) (string, error) {
		return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Greet whom?", Default: ptr("world")})
	}, "Bob\n")
	require.NoError(t, err)
	assert.Equal(t, "Bob", got, "typed text replaces the default")

	n, err := ask(s, "Count", func(ctx context.Context) (string, error) {
		return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Count:", Validate: ValidateInteger})
	}, "ten\n", "10\n")
	require.NoError(t, err)
	assert.Equal(t, "10", n)

	ok, err := ask(s, "Proceed", func(ctx context.Context) (bool, error) {
		return u.Confirm(ctx, "p", "Proceed?", nil)
	}, "y\n")
	require.NoError(t, err)
	assert.True(t, ok)

	idx, err := ask(s, "Environment", func(ctx context.Context) (int, error) {
		return u.Select(ctx, "p", "Environment?", []string{"staging", "production"}, nil)
	}, "2\n")
	require.NoError(t, err)
	assert.Equal(t, 1, idx)

	multi, err := ask(s, "Regions", func(ctx context.Context) ([]int, error) {
		return u.MultiSelect(ctx, "p", "Regions:", []string{"eu", "us", "ap"}, []int{0})
	}, "3\n", "0\n")
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2}, multi)
	assertCooked(t, s.tty)
}

// TestOutputOnTerminal: plugin output on a terminal is sanitised, waits while a question
// is on screen, and a log line never lands in the middle of an output line.
func TestOutputOnTerminal(t *testing.T) {
	s := newTermSessionOut(t, Options{}, true)
	u := s.ui
	u.Output("\x1b]0;title\x07partial")
	u.Log("p", "info", "log line")
	s.waitFor("log line")
	assert.Contains(t, s.screen.String(), "partial\r\n[p] info: log line")
	assert.NotContains(t, s.screen.String(), "title")

	got, err := ask(s, "Wait for me", func(ctx context.Context) (string, error) {
		return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Wait for me", Default: ptr("d")})
	}, func() { u.Output("held output\n") }, keyEnter)
	require.NoError(t, err)
	assert.Equal(t, "d", got)
	s.waitFor("held output")
	drawn := s.screen.String()[s.mark:]
	assert.Greater(t, strings.Index(drawn, "held output"), strings.LastIndex(drawn, "Wait for me"),
		"output written after the form's last frame")
	assert.Contains(t, drawn, "? [p] Wait for me d", "the answered question stays on screen")
	// Every line break reaching the terminal is CR LF: with a bare LF (output processing off
	// under raw mode) each form line would start where the previous one ended.
	assert.NotRegexp(t, `[^\r]\n`, drawn, "bare LF reached the terminal")
}
