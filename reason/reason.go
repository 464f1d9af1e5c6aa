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
	// MalformedResponse: a plugin's answer broke its protocol (a response to an id that was
	// never sent, a result that does not decode).
	MalformedResponse Code = "malformed_response"
)

// All lists every code, in taxonomy order (docs and tests iterate it).
var All = []Code{
	OK, LaunchFailed, HandshakeFailed, Timeout, Crashed, MalformedMessage,
	ProtocolVersionMismatch, CapabilityNotDeclared, CapabilityNotGranted, PathEscape,
	LimitExceeded, OOMKilled, SandboxUnavailable, Cancelled, NonInteractive, MalformedResponse,
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
