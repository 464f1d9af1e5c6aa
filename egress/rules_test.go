// SPDX-License-Identifier: MIT

package egress

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHTTPRules(t *testing.T) {
	p, err := NewPolicy(false, []string{"api.github.com:443 GET,head /repos/acme/**", "api.github.com:443 POST /repos/acme/*/issues", "other.test:443"})
	require.NoError(t, err)
	rules := p.RulesFor("api.github.com", 443)
	require.Len(t, rules, 2)
	assert.Equal(t, "api.github.com:443 GET,HEAD /repos/acme/**", rules[0].String())
	ok := func(m, path string) bool {
		for _, r := range rules {
			if r.Matches(m, path) {
				return true
			}
		}
		return false
	}
	assert.True(t, ok("GET", "/repos/acme/x/pulls"))
	assert.True(t, ok("HEAD", "/repos/acme"))
	assert.True(t, ok("POST", "/repos/acme/x/issues"))
	assert.False(t, ok("POST", "/repos/acme/x/y/issues"))
	assert.False(t, ok("DELETE", "/repos/acme/x"))
	assert.False(t, ok("GET", "/repos/other/x"))
	assert.False(t, ok("GET", "/repos/acme/../other/x"), "dot segments")
	assert.False(t, ok("GET", "/repos/acme/%2e%2e/other"), "encoded dot segments")
	assert.False(t, ok("GET", "/repos/acme%2Fx"), "encoded slash")
	assert.False(t, ok("GET", "/repos//acme/x"), "empty segment")
	assert.False(t, ok("GET", "/repos/acme/..;/other"), "dot segment with path parameters")
	assert.False(t, ok("GET", "/repos/acme/%252e%252e/other"), "dot segment encoded twice")
	assert.False(t, ok("GET", "/repos/acme/x%25252fy"), "slash encoded three times")
	assert.True(t, ok("GET", "/repos/acme/x;v=1"), "path parameters on a plain segment")
	assert.True(t, ok("GET", "/repos/acme/100%25"), "a literal percent sign")
	assert.True(t, ok("GET", "/repos/acme/%25zz"), "a percent sign that is no escape")
	assert.True(t, p.Intercept("api.github.com", 443))
	assert.False(t, p.Intercept("other.test", 443))
	assert.True(t, p.NameAndPort("api.github.com", 443), "a rule's destination is granted")

	// A plain entry for the same destination lifts its rules.
	p, err = NewPolicy(false, []string{"api.github.com:443 GET /a", "api.github.com:443"})
	require.NoError(t, err)
	assert.Nil(t, p.RulesFor("api.github.com", 443))

	for _, bad := range []string{"10.0.0.1:80 GET /", "a.test:1 GET /a/b*", "a.test:1 G@T /", "a.test:1 GET a", "a.test:1 GET /a /b", "a.test:1 GET /../x", "a.test:1 GET /**/**/**/**/**"} {
		_, _, err := ParseEntry(bad)
		assert.ErrorIs(t, err, ErrDestination, bad)
	}
}
