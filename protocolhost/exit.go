// SPDX-License-Identifier: MIT

package protocolhost

import (
	"fmt"

	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

// Exit statuses (docs/cli.md, "Exit codes"): the plugin's own, 2 usage, 126 could not run,
// 127 unknown command, 130 interrupted, 141 output closed; a tool or hook that failed for a reason of fledge's
// exits with that reason's status (reason.ExitStatus).
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitCannotRun   = 126
	ExitUnknownCmd  = 127
	ExitInterrupted = 130
	ExitToolFalse   = 1   // the tool answered success: false
	ExitTimeout     = 124 // the tool (or the plugin's start) ran out of time
	// ExitBrokenPipe: the reader of fledge's stdout or stderr went away (`fledge x | head
	// -1`): the status of a shell's program killed by SIGPIPE, 128+13.
	ExitBrokenPipe = 141
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

// ReasonExit is the exit status of a tool or hook call that failed for a reason of
// fledge's: the one mapping of reason codes to exit statuses (reason.ExitStatus, the
// table in docs/cli.md): 124 timeout, 130 cancelled, 126 launch_failed, 101-112 the others.
func ReasonExit(rc reason.Code) int {
	if rc == "" {
		return ExitOK
	}
	return reason.ExitStatus(rc)
}

// reasonExit is a failure's reason code printed and its documented status.
func reasonExit(code reason.Code, msg string) error {
	return &ExitError{Code: reason.ExitStatus(code), Msg: fmt.Sprintf("%s (reason: %s)", msg, code)}
}

// pluginExit is how a plugin's own end becomes fledge's: nil for success; otherwise its exit
// status, passed on as fledge's, with one line on stderr naming the plugin and its code or
// signal. The Rust fledge host reports the same ("Plugin 'x' exited with code N"); without it a
// plugin that died of `set -e` on an EACCES looks like a silent success in a terminal.
// res may be nil (the plugin could not be waited for; code then says what fledge reports).
func pluginExit(name string, code int, res *sandbox.Result) error {
	if code == 0 && (res == nil || res.Signal == "") {
		return nil
	}
	if res != nil && res.Signal != "" {
		msg := fmt.Sprintf("plugin %s killed by %s", name, res.Signal)
		if res.OOMKilled {
			msg += " (out of memory: the sandbox's memory limit)"
		}
		if code == 0 {
			code = ExitFailure
		}
		return &ExitError{Code: code, Msg: msg}
	}
	return &ExitError{Code: code, Msg: fmt.Sprintf("plugin %s exited with code %d", name, code)}
}

// ProtocolName is a manifest's protocol as users read it.
func ProtocolName(p string) string {
	if p == "" {
		return "no protocol (legacy)"
	}
	return p
}
