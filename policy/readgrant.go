// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Read grants are single paths (a file or a directory's tree) an installed plugin may read
// beyond its filesystem level: `fledge plugins grant NAME read=~/.gitconfig`, the kind of
// change `fledge plugins learn` proposes. They are read-only, for the plugin process and
// its commands alike, and never reach a key store, the fledge config or state, or a whole
// home or root.

// ErrReadGrant: a read grant that fledge never gives.
var ErrReadGrant = errors.New("path cannot be granted")

// ReadGrantPrefix is how a read grant is spelled in grant and revoke: read=PATH.
const ReadGrantPrefix = "read="

// CheckReadGrant returns nil when path may be a read grant for a plugin with paths p: an
// absolute, clean path that is not /, not $HOME itself, not inside one of the home's key
// and token stores (sensitiveHome), not the fledge config dir, state dir or audit log (nor
// one of their parents), and not /dev or a path under it (CheckDevicePath by name).
func CheckReadGrant(path string, p Paths) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("%w: %q is not an absolute, clean path", ErrReadGrant, path)
	}
	// A parent of the home is as wide as the home: it holds every key store below.
	if path == "/" || (p.Home != "" && Within(filepath.Clean(p.Home), path)) {
		return fmt.Errorf("%w: %q is a whole root or home", ErrReadGrant, path)
	}
	if p.Home != "" {
		for _, s := range sensitiveHome {
			// A parent of a store holds it: ~/.local/share holds ~/.local/share/keyrings.
			if sp := filepath.Join(p.Home, s); Within(path, sp) || Within(sp, path) {
				return fmt.Errorf("%w: %q holds keys or tokens (~/%s)", ErrReadGrant, path, s)
			}
		}
	}
	for _, d := range []string{p.ConfigDir, p.StateDir, p.AuditLog} {
		if d != "" && (Within(path, d) || Within(d, path)) {
			return fmt.Errorf("%w: %q is or holds fledge's own config or state", ErrReadGrant, path)
		}
	}
	// By name: what the path is on disk is the caller's to add (CheckDevicePath).
	return CheckDevicePath(path, 0)
}

// ExpandReadGrant turns what the user typed (read=~/x, read=/abs) into the path granted.
func ExpandReadGrant(item, home string) (string, bool) {
	v, ok := strings.CutPrefix(item, ReadGrantPrefix)
	if !ok {
		return "", false
	}
	if v == "~" || strings.HasPrefix(v, "~/") {
		if home == "" {
			return v, true
		}
		v = filepath.Join(home, strings.TrimPrefix(v, "~"))
	}
	return v, true
}

// readGrants are the entries of read that CheckReadGrant accepts (a plugins.toml edited by
// hand cannot widen them past the rule), sorted and without repeats.
func readGrants(read []string, p Paths) []string {
	var out []string
	for _, r := range read {
		if CheckReadGrant(r, p) == nil && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}
