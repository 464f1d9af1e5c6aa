// SPDX-License-Identifier: MIT

package plugin

import (
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"

	"github.com/fledgehq/fledge/policy"
)

// SetToolRules changes the tool rules of an installed plugin under the registry lock:
// change gets the rules it has now (nil: none) and returns the new ones (nil or empty:
// none). The entry as saved is returned.
func SetToolRules(configDir, name string, change func(cur *policy.ToolRules) (*policy.ToolRules, error)) (*Entry, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: %q", ErrNotInstalled, clip.Bytes(name, 80))
	}
	unlock, err := lockRegistry(configDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	reg, err := LoadRegistry(configDir)
	if err != nil {
		return nil, err
	}
	e := reg.Find(name)
	if e == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotInstalled, name)
	}
	next, err := change(e.Tools)
	if err != nil {
		return nil, err
	}
	if next.Empty() {
		next = nil
	}
	e.Tools = next
	if err := reg.Save(); err != nil {
		return nil, fmt.Errorf("save registry: %w", err)
	}
	out := *e
	return &out, nil
}
