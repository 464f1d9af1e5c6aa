// SPDX-License-Identifier: MIT

package egress

import (
	"net/netip"
	"time"
)

// Reasons in net_connect / net_dns records.
const (
	ReasonGranted       = "granted"         // a destination of the grant covers it
	ReasonAllowAll      = "network_all"     // the grant is network = true
	ReasonNotGranted    = "not_granted"     // no destination covers the name (or address) and port
	ReasonPrivate       = "private_address" // a granted name resolved to loopback/link-local/private/own address
	ReasonNameMismatch  = "name_mismatch"   // TLS SNI or an HTTP request names a host the grant does not cover
	ReasonBadRequest    = "bad_request"     // a ClientHello or HTTP request whose destination cannot be decided as the server would
	ReasonRule          = "rule"            // the destination's HTTP rules do not allow the request's method and path
	ReasonPlaceholder   = "unbound_secret"  // a secret's placeholder sent where the secret is not bound
	ReasonTLSRefused    = "tls_refused"     // the program refused the certificate fledge presented (it may pin its own)
	ReasonUpstreamTLS   = "upstream_tls"    // the destination's certificate did not verify against the host's trust store
	ReasonResolveFailed = "resolve_failed"  // the granted name did not resolve on the host
	ReasonDialFailed    = "dial_failed"     // the destination refused or did not answer
	ReasonLimit         = "limit_exceeded"  // connections in flight, names or bytes over the bound
	ReasonReset         = "reset"           // a side failed part way (its reset): fledge reset the other side too
	ReasonProtocol      = "protocol_refused"
	ReasonIPv6          = "ipv6_refused"
)

// Policy is one plugin's network grant.
type Policy struct {
	// All is network = true: every destination (the dangerous choice).
	All   bool
	Dests []Dest
	// Rules narrow destinations to methods and paths (entries with rules).
	Rules []Rule
	// Secrets are the bound secrets: fledge puts their values into requests to their own
	// destinations in place of their placeholders.
	Secrets []Secret
}

// Secret is a secret bound to destinations: the plugin holds Placeholder, fledge holds Value.
type Secret struct {
	Name        string
	Placeholder string
	Value       string
	Dests       []Dest
}

// NewPolicy parses a grant's list (destinations, and destinations with HTTP rules).
func NewPolicy(all bool, entries []string) (*Policy, error) {
	ds, rules, err := ParseEntries(entries)
	if err != nil {
		return nil, err
	}
	return &Policy{All: all, Dests: ds, Rules: rules}, nil
}

// Intercept reports whether fledge must read the requests of a connection to name:port
// (terminating its TLS): a bound secret goes there, or HTTP rules narrow it.
func (p *Policy) Intercept(name string, port uint16) bool {
	if len(p.RulesFor(name, port)) > 0 {
		return true
	}
	return len(p.SecretsFor(name, port)) > 0
}

// RulesFor returns the HTTP rules of name:port; nil when none applies, or when a plain
// entry for it lifts them.
func (p *Policy) RulesFor(name string, port uint16) []Rule {
	var out []Rule
	for _, r := range p.Rules {
		if r.Dest.MatchesName(name) && r.Dest.MatchesPort(port) {
			out = append(out, r)
		}
	}
	if out == nil {
		return nil
	}
	for _, d := range p.Dests {
		if d.MatchesName(name) && d.MatchesPort(port) && !d.ruled {
			return nil
		}
	}
	return out
}

// SecretsFor returns the secrets bound to name:port.
func (p *Policy) SecretsFor(name string, port uint16) []Secret {
	var out []Secret
	for _, s := range p.Secrets {
		for _, d := range s.Dests {
			if d.MatchesName(name) && d.MatchesPort(port) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// NameGranted reports whether some destination covers name on any port: only then does a
// lookup of it get an answer.
func (p *Policy) NameGranted(name string) bool {
	if p.All {
		return true
	}
	for _, d := range p.Dests {
		if d.MatchesName(name) {
			return true
		}
	}
	return false
}

// NameAndPort reports whether some destination covers name on port.
func (p *Policy) NameAndPort(name string, port uint16) bool {
	if p.All {
		return true
	}
	for _, d := range p.Dests {
		if d.MatchesName(name) && d.MatchesPort(port) {
			return true
		}
	}
	return false
}

// AddrAndPort reports whether an address grant covers a on port.
func (p *Policy) AddrAndPort(a netip.Addr, port uint16) bool {
	for _, d := range p.Dests {
		if d.MatchesAddr(a) && d.MatchesPort(port) {
			return true
		}
	}
	return false
}

// DecideName decides a connection the program made to a name (the one it looked up), now
// resolved on the host to a. own says whether a is one of the host's own addresses.
func (p *Policy) DecideName(name string, a netip.Addr, port uint16, own bool) (bool, string) {
	if p.All {
		return true, ReasonAllowAll
	}
	if !p.NameAndPort(name, port) {
		return false, ReasonNotGranted
	}
	if Special(a) || own {
		// Reaching loopback, link-local (cloud metadata), private ranges or the host itself
		// by a name is an SSRF route; only a grant naming the address itself opens it, or
		// "localhost" for loopback.
		if p.AddrAndPort(a, port) || (name == "localhost" && a.Unmap().IsLoopback()) {
			return true, ReasonGranted
		}
		return false, ReasonPrivate
	}
	return true, ReasonGranted
}

// DecideAddr decides a connection to an address literal (no name was looked up through
// fledge for it).
func (p *Policy) DecideAddr(a netip.Addr, port uint16) (bool, string) {
	if p.All {
		return true, ReasonAllowAll
	}
	if p.AddrAndPort(a, port) {
		return true, ReasonGranted
	}
	return false, ReasonNotGranted
}

var specialPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"224.0.0.0/4", "240.0.0.0/4", "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
		"64:ff9b::/96",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Special reports whether a is loopback, link-local (169.254.169.254, the cloud metadata
// service, included), private, carrier-grade NAT, multicast, reserved or unspecified.
func Special(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range specialPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Limits bound one plugin session's network.
type Limits struct {
	MaxConns    int           // connections open at once (default 128)
	MaxBytes    int64         // bytes per connection, each way (default 1 GiB)
	IdleTimeout time.Duration // a connection with no bytes either way for this long is closed (default 5 min)
	DialTimeout time.Duration // host-side connect (default 10 s)
	MaxNames    int           // distinct names answered in one session (default 4096)
}

// WithDefaults fills zero fields.
func (l Limits) WithDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = 128
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 1 << 30
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	if l.DialTimeout <= 0 {
		l.DialTimeout = 10 * time.Second
	}
	if l.MaxNames <= 0 {
		l.MaxNames = 4096
	}
	return l
}
