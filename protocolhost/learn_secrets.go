// SPDX-License-Identifier: MIT

package protocolhost

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
)

// secretBindings proposes a binding for each granted unbound secret whose placeholder the
// learn run's requests carried: learn binds such a secret, for its run, to every named
// destination the plugin was granted (core.Env.ObserveSecrets), and each net_http record
// names the secrets fledge put into a request; the proposal is the destinations it went to.
func secretBindings(auditPath, session string, entry *plugin.Entry) ([]secretNote, error) {
	unbound := map[string]bool{}
	for _, e := range entry.Granted.Secrets {
		if len(policy.SecretDests(e)) == 0 {
			unbound[policy.SecretName(e)] = true
		}
	}
	if len(unbound) == 0 {
		return nil, nil
	}
	went := map[string][]string{}
	counts := map[string]int{}
	err := audit.Read(auditPath, func(r *audit.Record) error {
		if r.Session != session || r.Event != audit.EventNetHTTP || r.Decision != audit.Allow {
			return nil
		}
		host, _ := r.Details["host"].(string)
		var port int64
		switch v := r.Details["port"].(type) {
		case json.Number:
			port, _ = v.Int64()
		case float64:
			port = int64(v)
		}
		names, _ := r.Details["secret"].([]any)
		for _, n := range names {
			s, _ := n.(string)
			if !unbound[s] || host == "" || port == 0 {
				continue
			}
			d := host + ":" + strconv.Itoa(int(port))
			counts[s+"\x00"+d]++
			if !slices.Contains(went[s], d) {
				went[s] = append(went[s], d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range went {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []secretNote
	for _, n := range names {
		ds := went[n]
		sort.Strings(ds)
		var seen []string
		for _, d := range ds {
			seen = append(seen, fmt.Sprintf("%s (%d requests)", d, counts[n+"\x00"+d]))
		}
		out = append(out, secretNote{name: n, bound: policy.SecretEntry(n, ds),
			where: fmt.Sprintf("%s went only to %s: bound to it, its value stays in fledge and the plugin holds a placeholder", n, strings.Join(seen, ", "))})
	}
	return out, nil
}
