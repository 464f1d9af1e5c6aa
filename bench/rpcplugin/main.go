// SPDX-License-Identifier: MIT

// Command rpcplugin is the JSON-RPC 2.0 tool/hook plugin (jsonrpc-2.0) make bench drives: one tool, echo,
// that answers its text argument, so a round trip measures the protocol path and not work.
package main

import (
	"bufio"
	"encoding/json"
	"os"
)

type request struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	} `json:"params"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if json.Unmarshal(in.Bytes(), &req) != nil {
			continue
		}
		var result any
		switch req.Method {
		case "initialize":
			result = map[string]any{
				"name": "bench-rpc", "version": "1.0.0", "description": "make bench's jsonrpc-2.0 plugin",
				"hooks": []string{}, "priority": 500,
				"tools": []any{map[string]any{"name": "echo", "description": "answers its text",
					"parameters": []any{map[string]any{"name": "text", "type": "string", "required": true}}}},
			}
		case "tool/execute":
			result = map[string]any{"success": true, "result": req.Params.Arguments["text"]}
		case "shutdown":
			_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": map[string]any{"ok": true}})
			return
		default:
			_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "Unknown method"}})
			continue
		}
		_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	}
}
