// SPDX-License-Identifier: MIT

package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseDest(t *testing.T) {
	good := map[string]string{
		"api.github.com:443":    "api.github.com:443",
		"API.GitHub.com.:443":   "api.github.com:443",
		"*.example.org:443":     "*.example.org:443",
		"localhost:8080":        "localhost:8080",
		"10.0.0.0/8:5432":       "10.0.0.0/8:5432",
		"db.internal:5432-5433": "db.internal:5432-5433",
		"127.0.0.1:80":          "127.0.0.1:80",
		"[2001:db8::1]:443":     "[2001:db8::1]:443",
		"[2001:db8::/32]:443":   "2001:db8::/32:443",
	}
	for in, want := range good {
		d, err := ParseDest(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if d.String() != want {
			t.Errorf("%q canonical %q, want %q", in, d.String(), want)
		}
	}
	bad := map[string]string{
		"api.github.com":  "no port",
		"*:443":           `"*" alone`,
		"*.com:443":       "two labels",
		"a..b:443":        "empty label",
		"10.0.0.1/8:5432": "host bits",
		"10.0.0.0/33:1":   "CIDR",
		"host:0":          "1 to 65535",
		"host:70000":      "1 to 65535",
		"host:10-5":       "backwards",
		"host:*":          "not a port",
		" host:1":         "spaces",
		"ho st:1":         "not allowed",
		"a.*.b:1":         "first label",
		"2001:db8::1:443": "[addr]:port",
		":443":            "no host",
	}
	for in, why := range bad {
		_, err := ParseDest(in)
		if err == nil {
			t.Errorf("%q accepted", in)
			continue
		}
		var de *DestError
		if !errors.As(err, &de) || !errors.Is(err, ErrDestination) || de.Entry != in {
			t.Errorf("%q: error %v is not a DestError naming the entry", in, err)
		}
		if !strings.Contains(err.Error(), why) {
			t.Errorf("%q: error %q does not say %q", in, err, why)
		}
	}
}

func TestDecide(t *testing.T) {
	p, err := NewPolicy(false, []string{"api.example.org:443", "*.cdn.example.org:443", "localhost:8080", "10.0.0.0/8:5432", "db.internal:5432-5433", "svc.test:80", "127.0.0.0/8:80"})
	if err != nil {
		t.Fatal(err)
	}
	pub := netip.MustParseAddr("93.184.216.34")
	cases := []struct {
		name  string
		addr  string
		port  uint16
		allow bool
		why   string
	}{
		{"api.example.org", "93.184.216.34", 443, true, ReasonGranted},
		{"api.example.org", "93.184.216.34", 80, false, ReasonNotGranted},
		{"a.b.cdn.example.org", "93.184.216.34", 443, true, ReasonGranted},
		{"cdn.example.org", "93.184.216.34", 443, false, ReasonNotGranted},
		{"api.example.org", "169.254.169.254", 443, false, ReasonPrivate},
		{"api.example.org", "127.0.0.1", 443, false, ReasonPrivate},
		{"api.example.org", "192.168.1.1", 443, false, ReasonPrivate},
		{"db.internal", "10.1.2.3", 5433, false, ReasonPrivate},
		{"db.internal", "10.1.2.3", 5432, true, ReasonGranted}, // 10/8:5432 names the range
		{"localhost", "127.0.0.1", 8080, true, ReasonGranted},
		{"svc.test", "127.0.0.1", 80, true, ReasonGranted},
		{"evil.test", "93.184.216.34", 443, false, ReasonNotGranted},
	}
	for _, c := range cases {
		ok, why := p.DecideName(c.name, netip.MustParseAddr(c.addr), c.port, false)
		if ok != c.allow || why != c.why {
			t.Errorf("%s %s:%d = %v %s, want %v %s", c.name, c.addr, c.port, ok, why, c.allow, c.why)
		}
	}
	if ok, _ := p.DecideName("api.example.org", pub, 443, true); ok {
		t.Error("the host's own address reached by name")
	}
	if ok, _ := p.DecideAddr(netip.MustParseAddr("10.9.9.9"), 5432); !ok {
		t.Error("address grant refused")
	}
	if ok, _ := p.DecideAddr(pub, 443); ok {
		t.Error("address literal allowed without an address grant")
	}
	if !p.NameGranted("x.cdn.example.org") || p.NameGranted("exfil.test") {
		t.Error("NameGranted")
	}
}

func TestLimiterBoundsFlood(t *testing.T) {
	l := Limiter{Burst: 5, Window: 1e9}
	admitted := 0
	for i := 0; i < 1000; i++ {
		ev := Event{Kind: EventConnect, Host: "x", Port: 1}
		if l.Admit(&ev, timeZero.Add(0)) {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d", admitted)
	}
	f := l.Flush()
	if len(f) != 1 || f[0].Suppressed != 995 {
		t.Fatalf("flush %+v", f)
	}
}

var timeZero = func() (t0 struct{ time.Time }) { return }().Time
