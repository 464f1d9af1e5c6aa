// SPDX-License-Identifier: MIT

// Package ui is fledge's terminal side: prompts, progress, plugin logs and output, and the
// sanitising that keeps plugin text from driving the user's terminal.
package ui

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrNonInteractive: the question has no default and nobody can answer it.
	ErrNonInteractive = errors.New("no answer possible in non-interactive mode")
	// ErrInvalidRequest: the request cannot be shown (e.g. select with no options, default
	// index out of range, unknown validator).
	ErrInvalidRequest = errors.New("invalid prompt request")
	// ErrAborted: the user gave up on the question (Ctrl+C in the form, or end of input)
	// instead of answering it; the host reports it as a user interrupt.
	ErrAborted = errors.New("prompt aborted by the user")
	// ErrInterrupted: the user pressed Ctrl+C at a question. It is an ErrAborted, and more:
	// like Ctrl+C anywhere else it interrupts the whole session (the host cancels the plugin
	// with user_interrupt), not just the question. The Rust fledge host behaves the same.
	ErrInterrupted = fmt.Errorf("%w: interrupted (Ctrl+C)", ErrAborted)
)

// PromptRequest asks for one line of text.
type PromptRequest struct {
	Plugin   string // shown as a prefix so the user knows who asks
	Message  string
	Default  *string
	Validate string // "", non_empty, integer, path_exists, url
}

// UI is what a plugin session needs from the terminal. Every method is safe for concurrent
// use; the host still serialises questions so only one is on screen at a time. Question
// methods return ctx.Err() when ctx ends first (prompt timeout, cancel).
type UI interface {
	Interactive() bool
	Prompt(ctx context.Context, req PromptRequest) (string, error)
	Confirm(ctx context.Context, plugin, message string, def *bool) (bool, error)
	Select(ctx context.Context, plugin, message string, options []string, def *int) (int, error)
	MultiSelect(ctx context.Context, plugin, message string, options []string, defaults []int) ([]int, error)
	// Progress shows a bar when total > 0, a spinner when current/total are nil, and clears
	// the display when done is true.
	Progress(plugin, message string, current, total *float64, done bool)
	// Log writes a plugin log line to stderr, colour-coded by level, prefixed with the plugin.
	Log(plugin, level, message string)
	// Output writes plugin text to stdout verbatim (sanitised on a TTY).
	Output(text string)
	// Warn writes a host warning (not from the plugin) to stderr.
	Warn(message string)
	// Close clears any progress display.
	Close()
}

// TextCopier is a UI whose Output and Log keep no string they are given once they return
// (they copy what they hold back), so the strings may point into a buffer the caller
// reuses: the fledge-v1 host then reads its plugin's output and log messages transient
// (protocol.ReaderOptions.Transient), which leaves no garbage per message.
type TextCopier interface {
	UI
	CopiesText()
}
