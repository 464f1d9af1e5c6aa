// SPDX-License-Identifier: MIT

package egress

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseDest holds the destination grammar to what Go's own parsers read in the same
// entry: an accepted "host:port" splits as net.SplitHostPort splits it, its host is the
// name (lower case, no trailing dot) or address Go reads, its canonical spelling parses
// back to the same destination, and the destination covers exactly its own name.
func FuzzParseDest(f *testing.F) {
	for _, s := range []string{"api.github.com:443", "*.example.org:443", "10.0.0.0/8:5432",
		"db.internal:5432-5433", "[::1]:80", "localhost:8080", "A.B.:1", "::1:80", "x:0", "1.2.3.4:65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDest(s)
		if err != nil {
			return
		}
		again, err := ParseDest(d.String())
		if err != nil || again.String() != d.String() {
			t.Fatalf("%q: canonical %q does not parse back (%v)", s, d.String(), err)
		}
		if strings.Contains(s, "/") || d.Wildcard {
			return
		}
		host, port, err := net.SplitHostPort(s)
		if err == nil && strings.Contains(port, "-") {
			return // a range: no Go parser to hold it to
		}
		if err != nil {
			t.Fatalf("%q accepted; Go cannot split it: %v", s, err)
		}
		if p, _ := strconv.Atoi(port); p != int(d.PortLo) {
			t.Fatalf("%q: port %d, Go reads %q", s, d.PortLo, port)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if !d.IsAddress() || !d.MatchesAddr(a) {
				t.Fatalf("%q: Go reads the address %s; fledge has %v", s, a, d)
			}
			return
		}
		want := strings.ToLower(strings.TrimSuffix(host, "."))
		if d.Host != want || !d.MatchesName(want) {
			t.Fatalf("%q: fledge's host %q, Go's %q", s, d.Host, want)
		}
		if cn, ok := CanonName(host); !ok || !d.MatchesName(cn) {
			t.Fatalf("%q: the name a lookup would carry (%q) is not covered", s, cn)
		}
	})
}
