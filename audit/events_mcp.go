// SPDX-License-Identifier: MIT

package audit

// Events of an MCP server's requests to fledge's MCP client (docs/audit.md).
const (
	// EventClientRequest: an MCP server asked fledge's client for sampling
	// (sampling/createMessage) or elicitation (elicitation/create). Allow when the plugin
	// holds that grant and the request is passed to the client fledge serves; deny
	// (capability_not_granted, limit_exceeded, or no client to pass it to) otherwise.
	// Details: kind, request_bytes; never the text.
	EventClientRequest = "mcp_client_request"
	// EventClientResponse: the answer of the client fledge serves to a request passed on
	// (kind, response_bytes, duration_ms, action for elicitation, error), never its text.
	EventClientResponse = "mcp_client_response"
	// EventServerRequest: serve --mcp passed a client's request other than a tool call to
	// a plugin's server (prompts/get, resources/read, resources/subscribe and unsubscribe,
	// completion/complete): method, the plugin's own prompt name or resource URI,
	// result_bytes, duration_ms, error.
	EventServerRequest = "mcp_request"
)

func init() { Events = append(Events, EventClientRequest, EventClientResponse, EventServerRequest) }
