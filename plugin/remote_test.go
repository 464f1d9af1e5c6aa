// SPDX-License-Identifier: MIT

package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A remote MCP server URL is https://, or plain http:// to loopback only; credentials never
// ride in it; its destination is what is granted.
func TestCheckRemoteURL(t *testing.T) {
	for raw, dest := range map[string]string{
		"https://mcp.example.com/mcp":    "mcp.example.com:443",
		"https://MCP.example.com:8443/x": "mcp.example.com:8443",
		"http://127.0.0.1:3001/mcp":      "127.0.0.1:3001",
		"http://localhost/mcp":           "localhost:80",
		"http://[::1]:9/mcp":             "[::1]:9",
		"http://127.8.9.10:3001/mcp?x=1": "127.8.9.10:3001",
	} {
		got, err := CheckRemoteURL(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, dest, got, raw)
	}
	for _, raw := range []string{
		"http://mcp.example.com/mcp",      // clear text beyond loopback
		"http://10.0.0.1:3001/mcp",        // a private address is not loopback
		"https://user:pw@mcp.example.com", // credentials in the URL
		"ftp://127.0.0.1/mcp",
		"https://mcp.example.com/mcp#frag",
		"mcp.example.com/mcp",
	} {
		_, err := CheckRemoteURL(raw)
		assert.ErrorIs(t, err, ErrRemoteURL, raw)
	}
}

// The manifest fledge writes for a remote server parses back: protocol mcp-remote, no
// commands, network to the URL's destination only, the token secret declared by name; a
// [remote] table elsewhere, or a token secret not declared, is an invalid manifest.
func TestWriteRemoteManifest(t *testing.T) {
	dir := t.TempDir()
	m, err := WriteRemoteManifest(dir, RemoteRequest{URL: "https://mcp.example.com/mcp", Name: "example", Version: "2.0.0", TokenSecret: "EXAMPLE_TOKEN"})
	require.NoError(t, err)
	assert.Equal(t, ProtocolMCPRemote, m.Plugin.Protocol)
	assert.Empty(t, m.Commands)
	assert.Equal(t, []string{"mcp.example.com:443"}, m.Capabilities.Network.To)
	assert.False(t, m.Capabilities.Network.All)
	assert.Equal(t, []string{"EXAMPLE_TOKEN"}, m.Capabilities.Secrets)
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	require.NoError(t, err)
	_, _, err = ParseManifest(b)
	require.NoError(t, err)

	undeclared := strings.Replace(string(b), `secrets = ["EXAMPLE_TOKEN"]`, `secrets = []`, 1)
	_, _, err = ParseManifest([]byte(undeclared))
	assert.ErrorIs(t, err, ErrInvalidManifest)
	elsewhere := strings.Replace(string(b), `protocol = "mcp-remote"`, `protocol = "mcp"`, 1)
	_, _, err = ParseManifest([]byte(elsewhere))
	assert.ErrorIs(t, err, ErrInvalidManifest)
	assert.Equal(t, "everything", RemoteName("mcp-servers/everything", "http://127.0.0.1:1/mcp"))
	assert.Equal(t, "remote-mcp-example-com", RemoteName("", "https://mcp.example.com/mcp"))
}
