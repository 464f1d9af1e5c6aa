// SPDX-License-Identifier: MIT

package protocolhost

import (
	"strings"

	"github.com/fledgehq/fledge/policy"
)

// networkTo is the list of destinations the plugin and its commands reach ([] when the
// grant is everything or nothing; see network).
func networkTo(cfg *policy.Config, g policy.Grants) []string {
	if cfg.Egress(g) == nil {
		return []string{}
	}
	return g.EgressEntries()
}

// secretsText says, for each granted secret, where its value goes: bound secrets stay in
// fledge (the plugin holds a placeholder), unbound ones are readable by the plugin.
func secretsText(g policy.Grants) []string {
	var out []string
	for _, e := range g.Secrets {
		n, d := policy.SecretName(e), policy.SecretDests(e)
		if len(d) == 0 {
			out = append(out, n+": its value is in the plugin's environment (readable by the plugin)")
			continue
		}
		out = append(out, n+": bound to "+strings.Join(d, ", ")+" (the plugin and its commands hold a placeholder; fledge puts the value into requests to these only)")
	}
	return out
}
