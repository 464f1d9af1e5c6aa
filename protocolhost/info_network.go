package protocolhost

import "github.com/fledgehq/fledge/policy"

// networkTo is the list of destinations the plugin and its commands reach ([] when the
// grant is everything or nothing; see network).
func networkTo(cfg *policy.Config, g policy.Grants) []string {
	if cfg.Egress(g) == nil {
		return []string{}
	}
	return g.NetworkTo
}
