// SPDX-License-Identifier: MIT

package audit

// Events of MCP client sessions served over Streamable HTTP (docs/audit.md).
const (
	// EventClientSessionStart: a client opened a session with `serve --mcp --listen`
	// (details: transport, remote address). Session is the client session's id.
	EventClientSessionStart = "client_session_start"
	// EventClientSessionEnd: that session ended (details: how it ended, its duration,
	// the client's name and version as it gave them).
	EventClientSessionEnd = "client_session_end"
)

func init() { Events = append(Events, EventClientSessionStart, EventClientSessionEnd) }
