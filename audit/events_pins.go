// SPDX-License-Identifier: MIT

package audit

// Events of pinned tool definitions (docs/audit.md).
const (
	// EventToolChanged: a self-describing plugin (MCP, JSON-RPC 2.0) listed a tool whose
	// definition (name, description, input schema) or whose server instructions differ
	// from the pinned ones; the tool is quarantined (deny, reason tool_changed, details
	// old_hash and new_hash). Written once per difference.
	EventToolChanged = "tool_changed"
	// EventToolsApproved: the user approved changed tool definitions (plugins approve).
	EventToolsApproved = "tools_approved"
)

func init() { Events = append(Events, EventToolChanged, EventToolsApproved) }
