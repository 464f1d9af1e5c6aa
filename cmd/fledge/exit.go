package main

import (
	"errors"
	"fmt"
)

// Exit codes (docs/cli.md, "Usage"): the plugin's own, 2 usage, 126 could not run, 127 unknown command,
// 130 interrupted.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitCannotRun   = 126
	ExitUnknownCmd  = 127
	ExitInterrupted = 130
)

// ExitError carries an exit status out of a command. Msg, when set, is printed as
// "fledge: <msg>"; a silent ExitError (the plugin's own status) prints nothing.
type ExitError struct {
	Code int
	Msg  string
	Err  error
}

func (e *ExitError) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	if e.Err != nil {
		return e.Err.Error()
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

func (e *ExitError) Unwrap() error { return e.Err }

func exitErr(code int, format string, a ...any) *ExitError {
	return &ExitError{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// ErrUsage marks a command-line mistake (exit 2).
var ErrUsage = errors.New("usage error")
