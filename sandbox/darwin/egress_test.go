// SPDX-License-Identifier: MIT

package darwin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/egress"
)

// A grant by destination becomes Seatbelt remote-tcp rules for its loopback ports only:
// Seatbelt cannot name other hosts, so those get nothing (never the whole network).
func TestProfileEgressLoopbackOnly(t *testing.T) {
	pol, err := egress.NewPolicy(false, []string{"localhost:8080", "127.0.0.1:9000-9001", "api.github.com:443"})
	require.NoError(t, err)
	s := execSpec(false)
	s.Egress = egress.NewSession(pol, egress.Limits{})
	got, err := Profile(s, goldenOpts())
	require.NoError(t, err)
	for _, want := range []string{`(remote tcp "localhost:8080")`, `(remote tcp "localhost:9000")`, `(remote tcp "localhost:9001")`} {
		assert.Contains(t, got, want)
	}
	assert.NotContains(t, got, `"*:*"`)
	assert.NotContains(t, got, "443")
	_, err = parseSBPL(got)
	require.NoError(t, err)
	assert.False(t, strings.Contains(got, "(deny network*)"))
}
