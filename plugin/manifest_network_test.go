// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func manifestWith(network string) string {
	return "[plugin]\nname = \"netp\"\nversion = \"1.0.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"x\"\nbinary = \"x.sh\"\n\n[capabilities]\nnetwork = " + network + "\n"
}

func TestManifestNetworkDestinations(t *testing.T) {
	m, _, err := ParseManifest([]byte(manifestWith(`["API.github.com:443", "*.example.org:443", "10.0.0.0/8:5432", "db.internal:5432-5433"]`)))
	if err != nil {
		t.Fatal(err)
	}
	d := m.Declared()
	want := []string{"api.github.com:443", "*.example.org:443", "10.0.0.0/8:5432", "db.internal:5432-5433"}
	if d.Network || !slices.Equal(d.NetworkTo, want) {
		t.Fatalf("declared %+v", d)
	}
	if got := d.Names(); !slices.Contains(got, "network=api.github.com:443") {
		t.Fatalf("names %v", got)
	}
	for _, v := range []string{"true", "false"} {
		m, _, err := ParseManifest([]byte(manifestWith(v)))
		if err != nil || m.Declared().Network != (v == "true") || len(m.Declared().NetworkTo) != 0 {
			t.Fatalf("%s: %v %+v", v, err, m)
		}
	}
}

func TestManifestNetworkInvalidEntries(t *testing.T) {
	for entry, why := range map[string]string{
		`["api.github.com"]`:      "no port",
		`["a..b:443"]`:            "empty label",
		`["*:443"]`:               `"*" alone`,
		`["10.0.0.1/33:80"]`:      "CIDR",
		`[443]`:                   "not a string",
		`"yes"`:                   "must be false, true or a list",
		`["ok.example:1", "bad"]`: "bad",
	} {
		_, _, err := ParseManifest([]byte(manifestWith(entry)))
		if err == nil {
			t.Errorf("%s accepted", entry)
			continue
		}
		if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), "plugin.toml") ||
			!strings.Contains(err.Error(), "[capabilities] network") || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v (want file, key and %q)", entry, err, why)
		}
	}
}
