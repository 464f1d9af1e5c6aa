// SPDX-License-Identifier: MIT

package audit

// Events of the runtime-v1 and invoke-v1 adapters (docs/audit.md, docs/protocols.md).
const (
	// EventHandshake is a runtime-v1 handshake's verdict: the manifest the plugin declared
	// (allow) or the rule it broke (deny, with the reason code).
	EventHandshake = "handshake"
	// EventInvokeRequest is the decision to send one invoke-v1 request (durable before it
	// is sent); EventInvokeOutcome is how that request ended (one per invoke_id).
	EventInvokeRequest = "invoke_request"
	EventInvokeOutcome = "invoke_outcome"
	// EventPluginInfo is an info line a plugin sent while starting (invoke-v1).
	EventPluginInfo = "plugin_info"
)
