// SPDX-License-Identifier: MIT

package ui

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

// syncBuffer is safe for concurrent writers (shared test helper).
type syncBuffer = testutil.SyncBuffer

func newPiped(t *testing.T, opts Options) (UI, *syncBuffer, *syncBuffer) {
	t.Helper()
	out, errb := &syncBuffer{}, &syncBuffer{}
	opts.Out, opts.Err = out, errb
	u := New(opts)
	t.Cleanup(u.Close)
	return u, out, errb
}

func TestNewInteractiveOnlyOnTerminal(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer devnull.Close()
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"no stdin", Options{}},
		{"stdin not a terminal", Options{In: devnull}},
		{"--ni", Options{In: devnull, NonInteractive: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, _, _ := newPiped(t, tt.opts)
			assert.False(t, u.Interactive())
		})
	}
}

func TestNonInteractiveRules(t *testing.T) {
	ctx := context.Background()
	u, out, errb := newPiped(t, Options{NonInteractive: true})
	opts := []string{"staging", "production", "dev"}

	tests := []struct {
		name    string
		ask     func() (any, error)
		want    any
		wantErr error
	}{
		{"prompt default", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Plugin: "p", Message: "Target?", Default: ptr("staging")})
		}, "staging", nil},
		{"prompt empty default is a default", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "x", Default: ptr("")})
		}, "", nil},
		{"prompt no default", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "Target?"})
		}, "", ErrNonInteractive},
		{"prompt unknown validator", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "x", Default: ptr("1"), Validate: "email"})
		}, "", ErrInvalidRequest},
		{"prompt known validator keeps default", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "n", Default: ptr("42"), Validate: "integer"})
		}, "42", nil},
		// A default is validated like a typed answer: one that fails is no answer.
		{"prompt default failing integer", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "n", Default: ptr("abc"), Validate: "integer"})
		}, "", ErrInvalidRequest},
		{"prompt empty default failing non_empty", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "n", Default: ptr(" "), Validate: "non_empty"})
		}, "", ErrInvalidRequest},
		{"prompt default failing url", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "n", Default: ptr("not a url"), Validate: "url"})
		}, "", ErrInvalidRequest},
		{"prompt default failing path_exists", func() (any, error) {
			return u.Prompt(ctx, PromptRequest{Message: "n", Default: ptr("/no/such/path/here"), Validate: "path_exists"})
		}, "", ErrInvalidRequest},
		{"confirm default true", func() (any, error) { return u.Confirm(ctx, "p", "ok?", ptr(true)) }, true, nil},
		{"confirm default false", func() (any, error) { return u.Confirm(ctx, "p", "ok?", ptr(false)) }, false, nil},
		{"confirm no default is false", func() (any, error) { return u.Confirm(ctx, "p", "ok?", nil) }, false, nil},
		{"select default", func() (any, error) { return u.Select(ctx, "p", "env", opts, ptr(1)) }, 1, nil},
		{"select no default never option 0", func() (any, error) { return u.Select(ctx, "p", "env", opts, nil) }, 0, ErrNonInteractive},
		{"select default out of range", func() (any, error) { return u.Select(ctx, "p", "env", opts, ptr(3)) }, 0, ErrInvalidRequest},
		{"select negative default", func() (any, error) { return u.Select(ctx, "p", "env", opts, ptr(-1)) }, 0, ErrInvalidRequest},
		{"select no options", func() (any, error) { return u.Select(ctx, "p", "env", nil, ptr(0)) }, 0, ErrInvalidRequest},
		{"select too many options", func() (any, error) {
			return u.Select(ctx, "p", "env", make([]string, MaxOptions+1), ptr(0))
		}, 0, ErrInvalidRequest},
		{"select max options ok", func() (any, error) {
			return u.Select(ctx, "p", "env", make([]string, MaxOptions), ptr(MaxOptions-1))
		}, MaxOptions - 1, nil},
		{"multi defaults sorted and unique", func() (any, error) {
			return u.MultiSelect(ctx, "p", "regions", opts, []int{2, 0, 2})
		}, []int{0, 2}, nil},
		{"multi no defaults is empty", func() (any, error) { return u.MultiSelect(ctx, "p", "regions", opts, nil) }, []int{}, nil},
		{"multi default out of range", func() (any, error) {
			return u.MultiSelect(ctx, "p", "regions", opts, []int{0, 9})
		}, []int(nil), ErrInvalidRequest},
		{"multi no options", func() (any, error) { return u.MultiSelect(ctx, "p", "r", []string{}, nil) }, []int(nil), ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ask()
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, got)
		})
	}
	assert.Empty(t, out.String(), "questions never write to stdout")
	assert.Empty(t, errb.String(), "non-interactive answers are silent")
}

func TestQuestionsHonourCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	u, _, _ := newPiped(t, Options{NonInteractive: true})
	_, err := u.Prompt(ctx, PromptRequest{Default: ptr("x")})
	assert.ErrorIs(t, err, context.Canceled)
	_, err = u.Confirm(ctx, "p", "m", ptr(true))
	assert.ErrorIs(t, err, context.Canceled)
	_, err = u.Select(ctx, "p", "m", []string{"a"}, ptr(0))
	assert.ErrorIs(t, err, context.Canceled)
	_, err = u.MultiSelect(ctx, "p", "m", []string{"a"}, nil)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestValidators(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, validator, in string
		ok                  bool
	}{
		{"none", "", "", true},
		{"non_empty ok", "non_empty", "x", true},
		{"non_empty blank", "non_empty", "  ", false},
		{"integer ok", "integer", "-42", true},
		{"integer spaces", "integer", " 7 ", true},
		{"integer float", "integer", "1.5", false},
		{"integer word", "integer", "ten", false},
		{"path exists", "path_exists", dir, true},
		{"path missing", "path_exists", filepath.Join(dir, "nope"), false},
		{"path empty", "path_exists", "", false},
		{"url https", "url", "https://example.com/x?y=1", true},
		{"url file", "url", "file:///etc/hosts", true},
		{"url no scheme", "url", "example.com", false},
		{"url no host", "url", "https://", false},
		{"url opaque", "url", "mailto:a@b.c", false},
		{"url garbage", "url", "::", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check, err := Validator(tt.validator)
			require.NoError(t, err)
			if tt.ok {
				assert.NoError(t, check(tt.in))
			} else {
				assert.Error(t, check(tt.in))
			}
		})
	}
	_, err := Validator("email")
	assert.ErrorIs(t, err, ErrInvalidRequest)
}

// TestLogGolden renders plugin logs and host warnings for a non-terminal stderr, without
// and with colour.
func TestLogGolden(t *testing.T) {
	for _, color := range []bool{false, true} {
		name := "log_plain.golden"
		if color {
			name = "log_color.golden"
		}
		t.Run(name, func(t *testing.T) {
			u, out, errb := newPiped(t, Options{NonInteractive: true, Color: ptr(color)})
			u.Log("deploy", "debug", "resolving targets")
			u.Log("deploy", "info", "using \x1b[1mstaging\x1b[0m")
			u.Log("deploy", "WARN", "no deploy config found, using defaults")
			u.Log("deploy", "warning", "old level name")
			u.Log("deploy", "error", "upload failed\n")
			u.Log("deploy", "trace", "unknown level shown as info")
			u.Log("deploy", "info", "line one\nfledge: warning: forged host line\rsneaky overwrite")
			u.Log("evil\x1b]0;t\x07\nname", "info", "\x1b]52;c;AAAA\x07\x1b[2Jclear screen attempt")
			u.Log("", "info", "")
			u.Warn("plugin \"deploy\" sent a malformed line; skipped")
			u.Close()
			assert.Empty(t, out.String())
			golden(t, name, errb.String())
		})
	}
}

func TestLogLineClipped(t *testing.T) {
	u, _, errb := newPiped(t, Options{NonInteractive: true})
	u.Log("big", "info", strings.Repeat("é", MaxLineBytes)) // 2 bytes a rune: cut on a rune boundary
	want := "[big] info: " + strings.Repeat("é", MaxLineBytes/2) + "…\n"
	assert.Equal(t, want, errb.String())
}

func TestLogLineCount(t *testing.T) {
	u, _, errb := newPiped(t, Options{NonInteractive: true})
	u.Log("p", "info", strings.Repeat("l\n", MaxShownLines+50))
	got := errb.String()
	assert.Equal(t, MaxShownLines+1, strings.Count(got, "\n"))
	assert.Contains(t, got, "[p] info: … (50 more lines)\n")
}

// TestProgressLinesGolden: on a non-terminal, a line only when the message or the whole
// percentage changes.
func TestProgressLinesGolden(t *testing.T) {
	u, out, errb := newPiped(t, Options{NonInteractive: true})
	f := func(v float64) *float64 { return &v }
	u.Progress("deploy", "Uploading", f(0), f(10), false)
	u.Progress("deploy", "Uploading", f(0.01), f(10), false) // still 0%
	u.Progress("deploy", "Uploading", f(3), f(10), false)
	u.Progress("deploy", "Uploading", f(3), f(10), false)     // no change
	u.Progress("deploy", "Uploading", f(3.001), f(10), false) // still 30%
	for i := 0; i <= 1000; i++ {
		u.Progress("deploy", "Uploading", f(3+float64(i)/1000), f(10), false) // 30% -> 40%
	}
	u.Progress("deploy", "Verifying", f(4), f(10), false)  // message change
	u.Progress("deploy", "Verifying", f(12), f(10), false) // clamped to 100%
	u.Log("deploy", "info", "log between progress lines")
	u.Progress("deploy", "Verifying", f(10), f(10), false) // same as before the log
	u.Progress("deploy", "Indexing", nil, nil, false)      // spinner: message only
	u.Progress("deploy", "Indexing", nil, nil, false)
	u.Progress("deploy", "Indexing", f(7), nil, false) // count without total
	u.Progress("deploy", "Zero total", f(1), f(0), false)
	u.Progress("deploy", "", nil, nil, true)
	u.Progress("deploy", "Indexing", nil, nil, false) // after done, shown again
	u.Progress("deploy", "\x1b[2J\x1b]0;t\x07Evil\nmessage", f(1), f(2), false)
	u.Progress("deploy", "", nil, nil, true)
	u.Close()
	u.Progress("deploy", "after close", nil, nil, false) // dropped
	assert.Empty(t, out.String())
	golden(t, "progress_lines.golden", errb.String())
}

func TestProgressBoundedUnderFlood(t *testing.T) {
	u, _, errb := newPiped(t, Options{NonInteractive: true})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				cur, tot := float64(i%100), 100.0
				u.Progress("p", "step "+strconv.Itoa(g), &cur, &tot, false)
				if i%500 == 0 {
					u.Log("p", "info", "tick")
				}
			}
		}()
	}
	wg.Wait()
	u.Progress("p", "", nil, nil, true)
	u.Close()
	// every line is whole: progress and logs never interleave mid-line
	for _, ln := range strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n") {
		assert.Regexp(t, `^\[p\] (step \d \d+/100 \(\d+%\)|info: tick)$`, ln)
	}
}

func TestOutput(t *testing.T) {
	nasty := "\x1b]0;title\x07data\x1b[2J\r\n\x1b[32mok\x1b[0m\xff\n"
	t.Run("piped verbatim", func(t *testing.T) {
		u, out, errb := newPiped(t, Options{NonInteractive: true})
		u.Output(nasty)
		u.Output("")
		assert.Equal(t, nasty, out.String())
		assert.Empty(t, errb.String())
	})
	t.Run("terminal sanitised", func(t *testing.T) {
		u, out, _ := newPiped(t, Options{NonInteractive: true, TTYOut: true})
		u.Output(nasty)
		assert.Equal(t, "data\n\x1b[32mok\x1b[0m\ufffd\n", out.String())
	})
}
