// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"fmt"

	"github.com/fledgehq/fledge/policy"
)

var (
	// ErrManifestChanged: the installed plugin.toml is not the one the user approved.
	ErrManifestChanged = errors.New("plugin.toml changed since it was approved")
	// ErrLegacyNoGrants: a legacy plugin (no protocol) runs as a whole program under the
	// legacy profile; capabilities do not apply to it, so granting one would mislead.
	ErrLegacyNoGrants = errors.New("a legacy plugin (no protocol) holds no capabilities: it runs under the legacy profile")
)

// GrantChange decides one change of a plugin's grants from its approved manifest and what it
// holds now (policy.GrantOne / policy.RevokeOne).
type GrantChange func(m *Manifest, cur policy.Grants) (policy.Change, error)

// ChangeGrants applies change to the granted set of an installed plugin, under the registry
// lock. The installed manifest must still be the approved one: a grant is checked against
// the declarations the user reviewed, never against a plugin.toml edited since. Only Granted
// changes; the approved digest stays as it was, so an edited manifest is still refused at
// run time.
func ChangeGrants(configDir, name string, change GrantChange, edit ...func(*Entry)) (*Entry, policy.Change, error) {
	reg, e, unlock, err := lockedEntry(configDir, name)
	if err != nil {
		return nil, policy.Change{}, err
	}
	defer unlock()
	m, _, err := LoadManifest(Dir(configDir, name))
	if err != nil {
		return nil, policy.Change{}, err
	}
	if got := m.SHA256(); got != e.ManifestSHA256 {
		return nil, policy.Change{}, fmt.Errorf("%w (sha256 %s, approved %s): reinstall it to review the change",
			ErrManifestChanged, got[:12], e.ManifestSHA256[:min(12, len(e.ManifestSHA256))])
	}
	if !m.HoldsGrants() {
		return nil, policy.Change{}, fmt.Errorf("%w: %s", ErrLegacyNoGrants, name)
	}
	c, err := change(m, e.Granted)
	if err != nil {
		return nil, policy.Change{}, err
	}
	e.Granted = c.After
	for _, fn := range edit {
		fn(e) // read grants (readgrants.go), under the same lock and checks
	}
	if err := reg.Save(); err != nil {
		return nil, policy.Change{}, fmt.Errorf("save registry: %w", err)
	}
	out := *e
	return &out, c, nil
}

// ApprovedManifest is the installed plugin.toml of e while it is still the one the user
// approved (its digest is e's), else ErrManifestChanged.
func ApprovedManifest(configDir string, e *Entry) (*Manifest, error) {
	m, _, err := LoadManifest(Dir(configDir, e.Name))
	if err != nil {
		return nil, err
	}
	if got := m.SHA256(); got != e.ManifestSHA256 {
		return nil, fmt.Errorf("%w (sha256 %s, approved %s)", ErrManifestChanged, got[:12], e.ManifestSHA256[:min(12, len(e.ManifestSHA256))])
	}
	return m, nil
}

// ApprovedAsked is what the user decided on when e was installed: what its approved
// manifest asks for, else (the manifest changed since, or is gone) only what e holds.
func ApprovedAsked(configDir string, e *Entry) policy.Grants {
	if m, err := ApprovedManifest(configDir, e); err == nil {
		return m.Asked()
	}
	return e.Granted
}
