// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBoundSecretGrammar(t *testing.T) {
	g, err := ParseGrantList("exec,secret=GITHUB_TOKEN@API.github.com:443,uploads.github.com:443,secret=NPM_TOKEN")
	require.NoError(t, err)
	assert.Equal(t, []string{"GITHUB_TOKEN@api.github.com:443,uploads.github.com:443", "NPM_TOKEN"}, g.Secrets)
	assert.Equal(t, []string{"api.github.com:443", "uploads.github.com:443"}, g.EgressEntries(), "a bound secret's destinations are granted with it")

	for _, bad := range []string{"secret=X@", "secret=X@10.0.0.1:443", "secret=X@a.test", "secret=LD_PRELOAD@a.test:1", "secret=X@a.test:1,secret=X"} {
		_, err := ParseGrantList(bad)
		assert.Error(t, err, bad)
	}

	declared := Grants{Secrets: []string{"GITHUB_TOKEN@api.github.com:443,uploads.github.com:443", "OPEN"}}
	within := func(s string) bool { return (Grants{Secrets: []string{s}}).Subset(declared) }
	assert.True(t, within("GITHUB_TOKEN@api.github.com:443"), "narrower binding")
	assert.False(t, within("GITHUB_TOKEN"), "an unbound grant of a secret declared bound would hand the plugin its value")
	assert.False(t, within("GITHUB_TOKEN@evil.test:443"))
	assert.True(t, within("OPEN@x.test:443"), "binding a secret declared unbound is narrower")
	assert.True(t, within("OPEN"))

	// Granting a secret declared bound by its name grants it bound.
	c, err := GrantOne(Grants{}, declared, declared, "secret=GITHUB_TOKEN")
	require.NoError(t, err)
	assert.Equal(t, []string{"GITHUB_TOKEN@api.github.com:443,uploads.github.com:443"}, c.After.Secrets)
	assert.Contains(t, Describe("secret=GITHUB_TOKEN@api.github.com:443"), "placeholder")
	assert.Contains(t, Describe("secret=OPEN"), "readable by the plugin")
}
