// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/ui/clip"
)

// maxTypo is how far (in edits) a name may be from a known one to be taken for its typo.
const maxTypo = 2

// editDistance is the Levenshtein distance of a and b (bytes; names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// closest is the known name nearest to s, and its distance ("" and -1 when known is empty).
func closest(s string, known []string) (string, int) {
	best, dist := "", -1
	for _, k := range known {
		if d := editDistance(s, k); dist < 0 || d < dist {
			best, dist = k, d
		}
	}
	return best, dist
}

// tomlKeys lists the toml keys of a struct type, sorted.
func tomlKeys(v any) []string {
	t := reflect.TypeOf(v)
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	sort.Strings(out)
	return out
}

var (
	pluginKeys       = tomlKeys(Meta{})
	capabilityKeys   = tomlKeys(Capabilities{})
	manifestSections = tomlKeys(Manifest{})
)

// unknownKeyError says whether an undecoded key changes the manifest's meaning silently and,
// if so, why. A key in [plugin] or [capabilities] is read by fledge to decide how the
// plugin runs and what it may do: one fledge does not know there is a typo (protcol =
// "fledge-v1" would install a legacy plugin) and an error. So is a section one or two edits
// from a known one ([capabilites] would install a plugin with no capabilities). Any other
// unknown key or section is left to manifests written for newer hosts: a warning.
func unknownKeyError(md toml.MetaData, k toml.Key) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidManifest}, a...)...)
	}
	hint := func(name string, known []string, wrap func(string) string) string {
		if c, d := closest(name, known); d >= 0 && d <= maxTypo+1 {
			return fmt.Sprintf("did you mean %s?", wrap(c))
		}
		quoted := make([]string, len(known))
		for i, n := range known {
			quoted[i] = wrap(n)
		}
		return "known: " + strings.Join(quoted, ", ")
	}
	plain := func(s string) string { return s }
	switch {
	case len(k) >= 2 && k[0] == "plugin":
		return bad("[plugin] %s: unknown key (%s)", clip.Bytes(k[1], 80), hint(k[1], pluginKeys, plain))
	case len(k) >= 2 && k[0] == "capabilities":
		return bad("[capabilities] %s: unknown key (%s)", clip.Bytes(k[1], 80), hint(k[1], capabilityKeys, plain))
	case len(k) == 1:
		switch md.Type(k...) {
		case "Hash", "ArrayHash":
		default:
			return nil // a top-level key: a warning
		}
		if c, d := closest(k[0], manifestSections); d >= 0 && d <= maxTypo {
			return bad("unknown section [%s] (did you mean [%s]?)", clip.Bytes(k[0], 80), c)
		}
	}
	return nil
}

// fsProblem says in words why a file of the plugin dir could not be used, without the
// system call's name (no "statat mian.sh: ...").
func fsProblem(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist in the plugin dir"
	case errors.Is(err, fs.ErrPermission):
		return "cannot be read (permission denied)"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if strings.Contains(pe.Err.Error(), "escapes") {
			return "resolves outside the plugin dir"
		}
		return pe.Err.Error()
	}
	return err.Error()
}

// nearbyFile suggests a file of bin's directory one or two edits from it (" (did you mean
// main.sh?)"), or "". The listing is bounded: a plugin dir is small, a huge one gets no hint.
func nearbyFile(root interface {
	Open(string) (*os.File, error)
}, bin string) string {
	dir, base := path.Split(filepath.ToSlash(bin))
	if dir == "" {
		dir = "."
	}
	d, err := root.Open(dir)
	if err != nil {
		return ""
	}
	defer d.Close()
	names, err := d.Readdirnames(1024)
	if err != nil && len(names) == 0 {
		return ""
	}
	c, dist := closest(base, names)
	if dist < 1 || dist > maxTypo {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", path.Join(strings.TrimSuffix(dir, "/"), c))
}
