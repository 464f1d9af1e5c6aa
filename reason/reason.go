// SPDX-License-Identifier: MIT

// Package reason holds the error taxonomy shared by protocol responses, audit records and
// exit paths. A reason is a stable, machine-readable code; user-facing text lives elsewhere.
package reason

// Code is one reason code of fledge's error taxonomy (docs/architecture.md lists them with
// the exit status each maps to).
type Code string

const (
	OK                      Code = "ok"
	LaunchFailed            Code = "launch_failed"
	HandshakeFailed         Code = "handshake_failed"
	Timeout                 Code = "timeout"
	Crashed                 Code = "crashed"
	MalformedMessage        Code = "malformed_message"
	ProtocolVersionMismatch Code = "protocol_version_mismatch"
	CapabilityNotDeclared   Code = "capability_not_declared"
	CapabilityNotGranted    Code = "capability_not_granted"
	PathEscape              Code = "path_escape"
	LimitExceeded           Code = "limit_exceeded"
	OOMKilled               Code = "oom_killed"
	SandboxUnavailable      Code = "sandbox_unavailable"
	Cancelled               Code = "cancelled"
	NonInteractive          Code = "non_interactive"
	// MalformedResponse: a plugin's reply is not one whole JSON object of the expected
	// shape, or a second line came where exactly one was expected (runtime-v1, invoke-v1).
	MalformedResponse Code = "malformed_response"
	// ToolNotExposed: the tool asked for is not among those the plugin's handshake exposes.
	ToolNotExposed Code = "tool_not_exposed"
	// CapabilityNotAllowed: a plugin declared a capability outside the host's allow-list for
	// its binding (or an empty, whitespace-padded or duplicate value).
	CapabilityNotAllowed Code = "capability_not_allowed"
	// ToolError: the tool ran and reported its own failure (an MCP result with isError, a
	// JSON-RPC error reply): the call happened and did not do what was asked.
	ToolError Code = "tool_error"
	// ToolChanged: the tool's definition (name, description, input schema) differs from the
	// one pinned when it was approved; it is quarantined until `fledge plugins approve`.
	ToolChanged Code = "tool_changed"
	// BadArguments: the arguments did not match the tool's declared parameters or schema;
	// nothing was sent to the plugin.
	BadArguments Code = "bad_arguments"
	// HookStopped: a hook plugin subscribed to pre_tool_execute answered stop: the tool
	// was not run; the plugin's result says why.
	HookStopped Code = "hook_stopped"
	// ToolDenied: the tool is denied by the user's tool rules (plugins tools NAME --deny)
	// or the managed policy's [tools]: it is not offered, and a call is refused.
	ToolDenied Code = "tool_denied"
)

// All lists every code, in taxonomy order (docs and tests iterate it).
var All = []Code{
	OK, LaunchFailed, HandshakeFailed, Timeout, Crashed, MalformedMessage,
	ProtocolVersionMismatch, CapabilityNotDeclared, CapabilityNotGranted, PathEscape,
	LimitExceeded, OOMKilled, SandboxUnavailable, Cancelled, NonInteractive,
	MalformedResponse, ToolNotExposed, CapabilityNotAllowed, ToolError, ToolChanged, BadArguments, HookStopped,
	ToolDenied,
}

// Valid reports whether c is a known code.
func (c Code) Valid() bool {
	for _, k := range All {
		if k == c {
			return true
		}
	}
	return false
}

// ToolFailed is the exit status of a tool or request that ran and reported its own failure
// (a plugin's error reply): not one of fledge's reasons.
const ToolFailed = 1

// exitStatus maps each reason to the exit status of a command that failed for it (the
// table in docs/cli.md). The values stay clear of 1 (the tool's own failure), 2 (usage), 126
// (could not run), 127 (unknown command) and 128+n (signals) except where the meaning is
// that one: a plugin that could not be started is 126, a user interrupt is 130, a time
// bound is 124 (as timeout(1)).
var exitStatus = map[Code]int{
	OK:                      0,
	LaunchFailed:            126,
	SandboxUnavailable:      126,
	HandshakeFailed:         101,
	ProtocolVersionMismatch: 102,
	CapabilityNotDeclared:   103,
	CapabilityNotAllowed:    104,
	CapabilityNotGranted:    105,
	ToolNotExposed:          106,
	MalformedResponse:       107,
	MalformedMessage:        107,
	Crashed:                 108,
	LimitExceeded:           109,
	OOMKilled:               110,
	PathEscape:              111,
	NonInteractive:          112,
	ToolChanged:             113,
	HookStopped:             114,
	ToolDenied:              115,
	ToolError:               ToolFailed,
	BadArguments:            2,
	Timeout:                 124,
	Cancelled:               130,
}

// ExitStatus is the exit status fledge ends with when a tool call or plugin request failed
// for reason c (documented in docs/cli.md). Unknown codes are 1.
func ExitStatus(c Code) int {
	if s, ok := exitStatus[c]; ok {
		return s
	}
	return ToolFailed
}

// Failure is a failure of fledge's taxonomy: its code and the words for the user. Of is
// the adapter's sentinel it wraps (errors.Is(err, runtimev1.ErrRuntime), ...).
type Failure struct {
	Code Code
	Msg  string
	Of   error
}

func (f *Failure) Error() string { return f.Msg + " (reason: " + string(f.Code) + ")" }
func (f *Failure) Unwrap() error { return f.Of }
