// SPDX-License-Identifier: MIT

package protocolhost

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
)

// learn proposes, for a granted unbound secret, the binding to exactly the destinations
// its placeholder went to in the traced run (as net_http records name it), and nothing for
// a secret already bound or one that went nowhere.
func TestLearnProposesSecretBinding(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := audit.Open(path, audit.Options{})
	require.NoError(t, err)
	add := func(session, host string, port int, secrets []string, d audit.Decision) {
		det := map[string]any{"host": host, "port": port, "method": "GET", "path": "/", "status": 200}
		if secrets != nil {
			det["secret"] = secrets
		}
		require.NoError(t, log.Append(&audit.Record{Session: session, Event: audit.EventNetHTTP, Decision: d, Details: det}, false))
	}
	add("s1", "api.github.com", 443, []string{"GITHUB_TOKEN"}, audit.Allow)
	add("s1", "api.github.com", 443, []string{"GITHUB_TOKEN"}, audit.Allow)
	add("s1", "uploads.github.com", 443, []string{"GITHUB_TOKEN"}, audit.Allow)
	add("s1", "api.github.com", 443, []string{"BOUND"}, audit.Allow)
	add("s1", "evil.test", 443, []string{"NPM_TOKEN"}, audit.Deny)
	add("s2", "other.test", 443, []string{"GITHUB_TOKEN"}, audit.Allow)
	require.NoError(t, log.Close())

	entry := &plugin.Entry{Name: "p", Granted: policy.Grants{Secrets: []string{"GITHUB_TOKEN", "NPM_TOKEN", "BOUND@api.github.com:443"}}}
	got, err := secretBindings(path, "s1", entry)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "GITHUB_TOKEN@api.github.com:443,uploads.github.com:443", got[0].bound)
	assert.Contains(t, got[0].where, "api.github.com:443 (2 requests)")
}
