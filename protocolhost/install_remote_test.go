// SPDX-License-Identifier: MIT

package protocolhost

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Which install sources are asked MCP's initialize first: https URLs and http ones to
// loopback that do not name a .git repository. A plain http:// URL elsewhere is never asked
// anything in clear (it is a git remote, as before), nor is a URL with credentials in it.
func TestRemoteSourceIsProbedOnlyWhereSafe(t *testing.T) {
	for s, want := range map[string]bool{
		"https://mcp.example.com/mcp":                 true,
		"http://127.0.0.1:3001/mcp":                   true,
		"https://github.com/acme/plugin.git":          false,
		"https://github.com/acme/plugin.git/":         false,
		"http://mcp.example.com/mcp":                  false,
		"https://user:token@git.example.com/r":        false,
		"git@github.com:acme/plugin.git":              false,
		"npm:@modelcontextprotocol/server-everything": false,
		"./plugins/hello":                             false,
	} {
		assert.Equal(t, want, remoteSource(s), s)
	}
}
