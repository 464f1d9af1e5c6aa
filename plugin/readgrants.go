// SPDX-License-Identifier: MIT

package plugin

import (
	"fmt"
	"slices"

	"github.com/fledgehq/fledge/policy"
)

// ChangeReadGrant adds (or, revoke, removes) one read grant of plugin name in
// <configDir>/plugins.toml, under the registry lock and against the approved manifest as
// ChangeGrants does. check vets the path (policy.CheckReadGrant with the plugin's paths);
// changed is false when the entry already held it (or did not, for a revoke).
func ChangeReadGrant(configDir, name, path string, revoke bool, check func(string) error) (*Entry, bool, error) {
	var changed bool
	e, _, err := ChangeGrants(configDir, name, func(_ *Manifest, cur policy.Grants) (policy.Change, error) {
		if !revoke {
			if err := check(path); err != nil {
				return policy.Change{}, err
			}
		}
		return policy.Change{Before: cur, After: cur, Item: policy.ReadGrantPrefix + path}, nil
	}, func(en *Entry) {
		has := slices.Contains(en.Read, path)
		switch {
		case revoke && has:
			en.Read = slices.DeleteFunc(en.Read, func(s string) bool { return s == path })
			changed = true
		case !revoke && !has:
			en.Read = append(en.Read, path)
			slices.Sort(en.Read)
			changed = true
		}
	})
	if err != nil {
		return nil, false, fmt.Errorf("read grant: %w", err)
	}
	return e, changed, nil
}
