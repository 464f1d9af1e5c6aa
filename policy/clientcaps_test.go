// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sampling and elicitation are MCP client capabilities: parsed, named, granted beyond what
// the manifest declares (no manifest declares them), and taken back, one at a time.
func TestClientCapabilitiesGrantable(t *testing.T) {
	g, err := ParseGrantList("exec,sampling,elicitation")
	require.NoError(t, err)
	assert.True(t, g.Sampling)
	assert.True(t, g.Elicitation)
	assert.Equal(t, []string{"exec", "sampling", "elicitation"}, g.Names())
	assert.Equal(t, "sampling,elicitation", g.ClientCapabilities().String())
	assert.Equal(t, "exec", g.WithoutClientCapabilities().String())

	declared := Grants{Exec: true, Filesystem: FilesystemNone}
	r, err := g.Resolve(declared)
	require.NoError(t, err, "granted whether or not the manifest mentions them")
	assert.True(t, r.Sampling && r.Elicitation && r.Exec)

	c, err := GrantOne(Grants{}, Grants{}, Grants{}, "sampling")
	require.NoError(t, err)
	assert.True(t, c.After.Sampling)
	assert.Equal(t, "sampling", c.Item)
	assert.False(t, c.Before.Equal(c.After))
	c, err = RevokeOne(c.After, "sampling")
	require.NoError(t, err)
	assert.False(t, c.After.Sampling)

	assert.True(t, ClientCapability(" Elicitation "))
	assert.False(t, ClientCapability("exec"))
	_, err = ParseGrantList("sampling,sampling")
	require.ErrorIs(t, err, ErrBadGrantList)
	assert.False(t, (Grants{Sampling: true}).Subset(Grants{}), "a client capability is not within nothing")
	assert.Equal(t, Grants{Sampling: true, Filesystem: FilesystemNone}, Grants{Filesystem: FilesystemNone}.Union(Grants{Sampling: true}))
}
