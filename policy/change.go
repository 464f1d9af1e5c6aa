// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrProtocolCapability: a protocol capability (exec, store, metadata) was granted beyond
// what the manifest declares. The spec keeps these within the declaration: the plugin's
// code was written (and reviewed) for what it declares.
var ErrProtocolCapability = fmt.Errorf("%w (exec, store and metadata can only be granted when declared)", ErrNotDeclared)

// ErrClientCapability: sampling or elicitation asked for a plugin that is no MCP server.
var ErrClientCapability = fmt.Errorf("%w (sampling and elicitation are MCP client capabilities, for MCP servers only)", ErrNotDeclared)

// Change is the outcome of one `plugins grant` or `plugins revoke`.
type Change struct {
	Before, After Grants
	// Item is the capability as applied, in Names spelling ("network", "filesystem=project").
	Item string
	// Unrequested lists sandbox capabilities granted beyond what the plugin asks for
	// (Manifest.Asked): allowed, but the user must be told the plugin did not ask for them.
	Unrequested []string
}

// parseOne parses exactly one capability item (no lists: one change, one audit record).
// It is the CLI's and plugins.toml's spelling only: runtime-v1's "filesystem:<level>" is
// not something users type, and a command that read it would record one spelling for
// another (ParseGrantName reads both, for runtime-v1 handshakes).
func parseOne(item string) (Grants, error) {
	return parseSingle(strings.TrimSpace(item))
}

// GrantOne adds one capability to cur. declared is what the manifest declares, asked what it
// asks for (declared plus the default filesystem level). exec, store and metadata must be
// declared (ErrProtocolCapability otherwise). network and filesystem are the sandbox's to
// give: the user may grant more than the plugin asks for, and Change.Unrequested says so. A
// bare "filesystem" means the level the plugin asks for, or "project" when it asks for none.
func GrantOne(cur, declared, asked Grants, item string) (Change, error) {
	g, err := parseOne(item)
	if err != nil {
		return Change{}, err
	}
	c := Change{Before: cur, After: cur}
	c.After.Filesystem = cur.FS()
	switch {
	case g.Sampling || g.Elicitation:
		// An MCP client capability: the protocol check is the caller's (ChangeGrant).
		c.After.Sampling = c.After.Sampling || g.Sampling
		c.After.Elicitation = c.After.Elicitation || g.Elicitation
		c.Item = CapSampling
		if g.Elicitation {
			c.Item = CapElicitation
		}
	case g.Exec || g.Store || g.Metadata:
		name := "exec"
		if g.Store {
			name = "store"
		} else if g.Metadata {
			name = "metadata"
		}
		if !(Grants{Exec: g.Exec, Store: g.Store, Metadata: g.Metadata}).Subset(declared) {
			return Change{}, fmt.Errorf("%w: %s (declared: %s)", ErrProtocolCapability, name, declared.String())
		}
		c.After.Exec = c.After.Exec || g.Exec
		c.After.Store = c.After.Store || g.Store
		c.After.Metadata = c.After.Metadata || g.Metadata
		c.Item = name
	case g.Network:
		c.After.Network, c.Item = true, "network"
		if !asked.Network {
			c.Unrequested = append(c.Unrequested, c.Item)
		}
	case len(g.Secrets) > 0: // one secret, only as declared
		n := g.Secrets[0]
		if d, ok := secretFind(declared.Secrets, SecretName(n)); ok && len(SecretDests(n)) == 0 && len(SecretDests(d)) > 0 {
			n = d // a secret declared bound is granted bound: its value stays out of the sandbox
		}
		c.Item = "secret=" + n
		if !secretWithin(n, declared.Secrets) {
			return Change{}, fmt.Errorf("%w: secret %s (declared secrets: %s)", ErrNotDeclared, n, strings.Join(declared.Secrets, ", "))
		}
		if !slices.Contains(cur.Secrets, n) {
			after := slices.DeleteFunc(slices.Clone(cur.Secrets), func(e string) bool { return SecretName(e) == SecretName(n) })
			c.After.Secrets = append(after, n)
		}
	case len(g.NetworkTo) > 0: // one destination
		d := g.NetworkTo[0]
		c.Item = "network=" + d
		if !slices.Contains(cur.NetworkTo, d) {
			c.After.NetworkTo = append(slices.Clone(cur.NetworkTo), d)
		}
		if !asked.Network && !slices.Contains(asked.NetworkTo, d) {
			c.Unrequested = append(c.Unrequested, c.Item)
		}
	default: // filesystem
		level := g.Filesystem
		if level == FilesystemDeclared {
			level = asked.FS()
			if level == FilesystemNone {
				level = FilesystemProject
			}
		}
		c.After.Filesystem, c.Item = level, "filesystem="+level
		if fsRank(level) > fsRank(asked.FS()) {
			c.Unrequested = append(c.Unrequested, c.Item)
		}
	}
	return c, nil
}

// RevokeOne removes one capability from cur: exec, store, metadata, network, or filesystem
// (any level: the plugin process then reads nothing of the project).
func RevokeOne(cur Grants, item string) (Change, error) {
	item = strings.TrimSpace(item)
	if !strings.HasPrefix(strings.ToLower(item), "secret=") { // secret names keep their case
		item = strings.ToLower(item)
	}
	if strings.HasPrefix(item, "filesystem=") {
		return Change{}, fmt.Errorf("%w: %q (revoke takes the name only: filesystem)", ErrUnknownCapability, item)
	}
	g, err := parseOne(item)
	if err != nil {
		return Change{}, err
	}
	c := Change{Before: cur, After: cur, Item: item}
	c.After.Filesystem = cur.FS()
	switch {
	case g.Sampling:
		c.After.Sampling = false
	case g.Elicitation:
		c.After.Elicitation = false
	case g.Exec:
		c.After.Exec = false
	case g.Store:
		c.After.Store = false
	case g.Metadata:
		c.After.Metadata = false
	case g.Network: // the whole grant: everything and every destination
		c.Item = "network"
		c.After.Network, c.After.NetworkTo = false, nil
	case len(g.Secrets) > 0:
		c.Item = "secret=" + g.Secrets[0]
		c.After.Secrets = slices.DeleteFunc(slices.Clone(cur.Secrets), func(n string) bool { return SecretName(n) == SecretName(g.Secrets[0]) })
		if len(c.After.Secrets) == 0 {
			c.After.Secrets = nil
		}
	case len(g.NetworkTo) > 0:
		c.Item = "network=" + g.NetworkTo[0]
		c.After.NetworkTo = slices.DeleteFunc(slices.Clone(cur.NetworkTo), func(d string) bool { return d == g.NetworkTo[0] })
		if len(c.After.NetworkTo) == 0 {
			c.After.NetworkTo = nil
		}
	case g.Filesystem == FilesystemDeclared:
		c.After.Filesystem = FilesystemNone
	default:
		return Change{}, errors.New("policy: unreachable revoke item " + item)
	}
	return c, nil
}
