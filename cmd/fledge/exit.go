// SPDX-License-Identifier: MIT

package main

import (
	"errors"
	"fmt"

	"github.com/fledgehq/fledge/protocolhost"
)

// Exit codes (docs/cli.md, "Exit codes"): protocolhost owns them, since the statuses of a
// plugin's run are decided there.
const (
	ExitOK          = protocolhost.ExitOK
	ExitFailure     = protocolhost.ExitFailure
	ExitUsage       = protocolhost.ExitUsage
	ExitCannotRun   = protocolhost.ExitCannotRun
	ExitUnknownCmd  = protocolhost.ExitUnknownCmd
	ExitInterrupted = protocolhost.ExitInterrupted
	ExitToolFalse   = protocolhost.ExitToolFalse
	ExitTimeout     = protocolhost.ExitTimeout
	ExitBrokenPipe  = protocolhost.ExitBrokenPipe
)

// ExitError carries an exit status out of a command (protocolhost.ExitError).
type ExitError = protocolhost.ExitError

func exitErr(code int, format string, a ...any) *ExitError {
	return &ExitError{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// ErrUsage marks a command-line mistake (exit 2).
var ErrUsage = errors.New("usage error")
