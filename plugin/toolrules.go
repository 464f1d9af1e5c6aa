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
	reg, e, unlock, err := lockedEntry(configDir, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
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

// lockedEntry takes the registry lock and finds an installed plugin's entry in the registry
// as it is on disk now: the first step of every change to one entry. The caller releases
// the lock with unlock (nil on error: nothing to release).
func lockedEntry(configDir, name string) (reg *Registry, e *Entry, unlock func(), err error) {
	if !ValidName(name) {
		return nil, nil, nil, fmt.Errorf("%w: %q", ErrNotInstalled, clip.Bytes(name, 80))
	}
	if unlock, err = lockRegistry(configDir); err != nil {
		return nil, nil, nil, err
	}
	if reg, err = LoadRegistry(configDir); err != nil {
		unlock()
		return nil, nil, nil, err
	}
	if e = reg.Find(name); e == nil {
		unlock()
		return nil, nil, nil, fmt.Errorf("%w: %q", ErrNotInstalled, name)
	}
	return reg, e, unlock, nil
}
