// SPDX-License-Identifier: MIT

package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/ui/clip"
)

// A secrets entry is a name ("GITHUB_TOKEN"), or a name bound to destinations
// ("GITHUB_TOKEN@api.github.com:443", several: "NAME@host:port,host:port"). A bound
// secret's value never enters the sandbox: the plugin and its commands hold a placeholder
// under the name, and fledge puts the value into requests to those destinations only (they
// are granted with it). An unbound secret's value is in the plugin's environment.

// ParseSecretEntry parses one secrets entry into its name and its destinations (canonical;
// none for an unbound secret).
func ParseSecretEntry(s string) (string, []string, error) {
	name, list, bound := strings.Cut(s, "@")
	if !ValidSecretName(name) {
		return "", nil, fmt.Errorf("%w: secret %q: not an environment variable name fledge passes (letters, digits and _, not PATH, HOME, TMPDIR, LD_* or FLEDGE_*)", ErrUnknownCapability, clip.Mark(name, 80, "…"))
	}
	if !bound {
		return name, nil, nil
	}
	if list == "" {
		return "", nil, fmt.Errorf("%w: secret %s@: no destination after @ (write %s@host:port)", ErrUnknownCapability, name, name)
	}
	var dests []string
	for _, e := range strings.Split(list, ",") {
		d, err := egress.ParseDest(e)
		if err != nil {
			return "", nil, fmt.Errorf("%w: secret %s: %w", ErrUnknownCapability, name, err)
		}
		if d.IsAddress() {
			return "", nil, fmt.Errorf("%w: secret %s: bound to %s: a secret is bound to a host name (its TLS certificate is checked by name)", ErrUnknownCapability, name, d)
		}
		if !slices.Contains(dests, d.String()) {
			dests = append(dests, d.String())
		}
	}
	return name, dests, nil
}

// SecretEntry spells a name and its destinations as one entry.
func SecretEntry(name string, dests []string) string {
	if len(dests) == 0 {
		return name
	}
	return name + "@" + strings.Join(dests, ",")
}

// SecretName is the name of a secrets entry.
func SecretName(entry string) string {
	n, _, _ := strings.Cut(entry, "@")
	return n
}

// SecretDests are the destinations a secrets entry is bound to (none: unbound).
func SecretDests(entry string) []string {
	_, list, ok := strings.Cut(entry, "@")
	if !ok || list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// secretFind returns the entry of list naming name.
func secretFind(list []string, name string) (string, bool) {
	for _, e := range list {
		if SecretName(e) == name {
			return e, true
		}
	}
	return "", false
}

// secretWithin reports whether entry e asks no more than the entry of of with its name:
// an unbound secret's value is the plugin's, so only an unbound declaration covers it; a
// bound one is covered by an unbound declaration or one bound to all its destinations.
func secretWithin(e string, of []string) bool {
	o, ok := secretFind(of, SecretName(e))
	if !ok {
		return false
	}
	od := SecretDests(o)
	if len(od) == 0 {
		return true
	}
	ed := SecretDests(e)
	if len(ed) == 0 {
		return false
	}
	for _, d := range ed {
		if !slices.Contains(od, d) {
			return false
		}
	}
	return true
}

// SecretNames are the names of a list of secrets entries.
func SecretNames(entries []string) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, SecretName(e))
	}
	return out
}

// EgressEntries are the network entries a grant's network by destination serves: its
// destinations and those its bound secrets are granted with.
func (g Grants) EgressEntries() []string {
	out := slices.Clone(g.NetworkTo)
	for _, e := range g.Secrets {
		for _, d := range SecretDests(e) {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}
