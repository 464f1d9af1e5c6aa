// SPDX-License-Identifier: MIT

// Package egress is fledge's network policy by destination: the grammar of a granted
// destination ("api.github.com:443", "*.example.org:443", "10.0.0.0/8:5432",
// "db.internal:5432-5433"), the decision for one connection or one name lookup (including
// the refusal of private and loopback addresses reached by name), and the records those
// decisions produce. It imports nothing OS-specific: the engine that enforces it in a
// network namespace of the plugin's own is package sandbox/netstack.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ErrDestination is wrapped by every error about a destination entry that cannot be used.
var ErrDestination = errors.New("invalid network destination")

// DestError says which entry is wrong and why (user-facing: the entry and the reason only).
type DestError struct {
	Entry string
	Why   string
}

func (e *DestError) Error() string {
	return fmt.Sprintf("%s %q: %s", ErrDestination, e.Entry, e.Why)
}

func (e *DestError) Unwrap() error { return ErrDestination }

// MaxDestinations bounds one grant's list: a manifest naming more is refused.
const MaxDestinations = 256

// Dest is one granted destination: a host name pattern or an address prefix, and a port
// range.
type Dest struct {
	// Host is a lower-case DNS name without the trailing dot; "" when Prefix is set.
	// Wildcard means Host is a suffix: "*.example.org" matches one label or more before
	// "example.org", never "example.org" itself.
	Host     string
	Wildcard bool
	// Prefix is set for an address ("10.1.2.3", a /32) or a range ("10.0.0.0/8").
	Prefix  netip.Prefix
	PortLo  uint16
	PortHi  uint16
	entry   string
	literal bool
	// ruled: granted only as the destination of HTTP rules (no plain entry lifts them).
	ruled bool
}

// String is the entry in its canonical spelling.
func (d Dest) String() string { return d.entry }

// IsAddress reports whether d names addresses rather than a host name.
func (d Dest) IsAddress() bool { return d.literal }

// ParseDest parses one destination entry.
func ParseDest(s string) (Dest, error) {
	bad := func(why string) (Dest, error) { return Dest{}, &DestError{Entry: s, Why: why} }
	if s != strings.TrimSpace(s) || s == "" {
		return bad("empty or padded with spaces")
	}
	if len(s) > 300 {
		return bad("longer than 300 characters")
	}
	var host, ports string
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 || end+1 >= len(s) || s[end+1] != ':' {
			return bad(`an IPv6 address is written "[addr]:port"`)
		}
		host, ports = s[1:end], s[end+2:]
	} else {
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return bad(`no port: write "host:port" (or "host:low-high")`)
		}
		host, ports = s[:i], s[i+1:]
		if strings.Contains(host, ":") {
			return bad(`an IPv6 address is written "[addr]:port"`)
		}
	}
	lo, hi, err := parsePorts(ports)
	if err != nil {
		return bad(err.Error())
	}
	d := Dest{PortLo: lo, PortHi: hi}
	switch {
	case host == "":
		return bad("no host before the port")
	case host == "*":
		return bad(`"*" alone is every host: grant network = true instead, if that is really meant`)
	case strings.Contains(host, "/"):
		p, perr := netip.ParsePrefix(host)
		if perr != nil {
			return bad("bad address range (CIDR): " + perr.Error())
		}
		if p.Masked() != p {
			return bad(fmt.Sprintf("address range has host bits set (did you mean %s?)", p.Masked()))
		}
		d.Prefix, d.literal = p, true
	default:
		if a, aerr := netip.ParseAddr(host); aerr == nil {
			if a.Zone() != "" {
				return bad("an address with a zone is not a destination")
			}
			a = a.Unmap()
			d.Prefix, d.literal = netip.PrefixFrom(a, a.BitLen()), true
			break
		}
		name := strings.ToLower(strings.TrimSuffix(host, "."))
		if strings.HasPrefix(name, "*.") {
			d.Wildcard = true
			name = name[2:]
		}
		if why := checkName(name); why != "" {
			return bad(why)
		}
		if d.Wildcard && !strings.Contains(name, ".") {
			return bad(`a wildcard needs at least two labels after "*." (a whole top-level domain is too wide)`)
		}
		d.Host = name
	}
	d.entry = d.canonical()
	return d, nil
}

func (d Dest) canonical() string {
	var h string
	switch {
	case d.literal && d.Prefix.IsSingleIP() && d.Prefix.Addr().Is6():
		h = "[" + d.Prefix.Addr().String() + "]"
	case d.literal && d.Prefix.IsSingleIP():
		h = d.Prefix.Addr().String()
	case d.literal:
		h = d.Prefix.String()
	case d.Wildcard:
		h = "*." + d.Host
	default:
		h = d.Host
	}
	if d.PortLo == d.PortHi {
		return h + ":" + strconv.Itoa(int(d.PortLo))
	}
	return fmt.Sprintf("%s:%d-%d", h, d.PortLo, d.PortHi)
}

func parsePorts(s string) (uint16, uint16, error) {
	one := func(p string) (uint16, error) {
		n, err := strconv.Atoi(p)
		if err != nil || p == "" || p[0] == '+' || n < 1 || n > 65535 {
			return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
		return uint16(n), nil
	}
	if s == "" {
		return 0, 0, errors.New(`no port: write "host:port" (or "host:low-high")`)
	}
	if s == "*" {
		return 0, 0, errors.New(`"*" is not a port: name the port or a range ("1-65535")`)
	}
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := one(lo)
	if err != nil {
		return 0, 0, err
	}
	if !isRange {
		return a, a, nil
	}
	b, err := one(hi)
	if err != nil {
		return 0, 0, err
	}
	if b < a {
		return 0, 0, fmt.Errorf("port range %d-%d runs backwards", a, b)
	}
	return a, b, nil
}

// checkName says why name is not a usable DNS name, or "".
func checkName(name string) string {
	if name == "" {
		return "empty host name"
	}
	if len(name) > 253 {
		return "host name longer than 253 characters"
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return "empty label in host name"
		}
		if len(l) > 63 {
			return "label longer than 63 characters"
		}
		if l == "*" {
			return `"*" may only stand as the first label ("*.example.org")`
		}
		for _, c := range l {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return fmt.Sprintf("character %q is not allowed in a host name", c)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "a label may not start or end with '-'"
		}
	}
	return ""
}

// CanonName lower-cases a looked-up name and strips its trailing dot; ok is false when it
// is no valid DNS name (such a name matches no grant).
func CanonName(name string) (string, bool) {
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	return n, checkName(n) == ""
}

// MatchesName reports whether d's host pattern covers name (canonical form), any port.
func (d Dest) MatchesName(name string) bool {
	if d.literal {
		return false
	}
	if d.Wildcard {
		return len(name) > len(d.Host)+1 && strings.HasSuffix(name, "."+d.Host)
	}
	return name == d.Host
}

// MatchesPort reports whether port is in d's range.
func (d Dest) MatchesPort(port uint16) bool { return port >= d.PortLo && port <= d.PortHi }

// MatchesAddr reports whether d is an address grant covering a.
func (d Dest) MatchesAddr(a netip.Addr) bool { return d.literal && d.Prefix.Contains(a.Unmap()) }

// ParseList parses a grant's destination list; the error names each bad entry.
func ParseList(entries []string) ([]Dest, error) {
	if len(entries) > MaxDestinations {
		return nil, &DestError{Entry: fmt.Sprintf("(%d entries)", len(entries)), Why: fmt.Sprintf("more than %d destinations", MaxDestinations)}
	}
	out := make([]Dest, 0, len(entries))
	var errs []error
	seen := map[string]bool{}
	for _, e := range entries {
		d, err := ParseDest(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[d.entry] {
			continue
		}
		seen[d.entry] = true
		out = append(out, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParseEntries parses a grant's network list whose entries may carry HTTP rules: the
// destinations (each once; a rule's destination among them) and the rules.
func ParseEntries(entries []string) ([]Dest, []Rule, error) {
	if len(entries) > MaxDestinations {
		return nil, nil, &DestError{Entry: fmt.Sprintf("(%d entries)", len(entries)), Why: fmt.Sprintf("more than %d destinations", MaxDestinations)}
	}
	var ds []Dest
	var rules []Rule
	var errs []error
	seen := map[string]bool{}
	plain := map[string]bool{}
	for _, e := range entries {
		d, r, err := ParseEntry(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r != nil {
			rules = append(rules, *r)
		} else {
			plain[d.entry] = true
		}
		if !seen[d.entry] {
			seen[d.entry] = true
			ds = append(ds, d)
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	for i := range ds {
		ds[i].ruled = !plain[ds[i].entry]
	}
	return ds, rules, nil
}

// Strings is the canonical spelling of each destination.
func Strings(ds []Dest) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.entry
	}
	return out
}

// CanonEntries is the canonical spelling of each network entry (a destination, or a
// destination with its HTTP rule), each once, in order; entries that do not parse are left
// out (ParseEntries says why).
func CanonEntries(entries []string) []string {
	out := []string{}
	for _, e := range entries {
		d, r, err := ParseEntry(e)
		if err != nil {
			continue
		}
		s := d.String()
		if r != nil {
			s = r.String()
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
