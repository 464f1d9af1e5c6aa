// SPDX-License-Identifier: MIT

package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

func grantItem(item string) GrantChange {
	return func(m *Manifest, cur policy.Grants) (policy.Change, error) {
		return policy.GrantOne(cur, m.Declared(), m.Asked(), item)
	}
}

func TestChangeGrants(t *testing.T) {
	cfg := t.TempDir()
	e, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) {
		g := policy.Grants{Store: true}
		o.Grant = &g
	})
	require.NoError(t, err)
	approved := e.ManifestSHA256

	// A declared protocol capability: granted, recorded, the approved digest unchanged.
	got, c, err := ChangeGrants(cfg, "hello", grantItem("exec"))
	require.NoError(t, err)
	assert.Equal(t, policy.Grants{Exec: true, Store: true, Filesystem: "none"}, got.Granted)
	assert.Equal(t, policy.Grants{Store: true, Filesystem: "none"}, c.Before)
	reg, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Equal(t, got.Granted, reg.Find("hello").Granted)
	assert.Equal(t, approved, reg.Find("hello").ManifestSHA256)

	// Undeclared protocol capability: refused, nothing written.
	_, _, err = ChangeGrants(cfg, "hello", grantItem("metadata"))
	require.ErrorIs(t, err, policy.ErrNotDeclared)
	reg, err = LoadRegistry(cfg)
	require.NoError(t, err)
	assert.False(t, reg.Find("hello").Granted.Metadata)

	// Network was not declared: granted, and flagged as unrequested.
	got, c, err = ChangeGrants(cfg, "hello", grantItem("network"))
	require.NoError(t, err)
	assert.True(t, got.Granted.Network)
	assert.Equal(t, []string{"network"}, c.Unrequested)

	// Someone edits the installed manifest: the grant is refused, not checked against the
	// edit, and the approved digest still catches the edit.
	manifest := filepath.Join(Dir(cfg, "hello"), ManifestFile)
	raw, err := os.ReadFile(manifest)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(manifest, append(raw, []byte("\n# edited\n")...), 0o644))
	_, _, err = ChangeGrants(cfg, "hello", grantItem("exec"))
	require.ErrorIs(t, err, ErrManifestChanged)
	reg, err = LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Equal(t, approved, reg.Find("hello").ManifestSHA256)

	_, _, err = ChangeGrants(cfg, "nope", grantItem("exec"))
	require.ErrorIs(t, err, ErrNotInstalled)

	// A legacy plugin has no capabilities to change.
	_, _, err = install(t, cfg, "testdata/legacy", nil)
	require.NoError(t, err)
	_, _, err = ChangeGrants(cfg, "legacy", grantItem("network"))
	require.ErrorIs(t, err, ErrLegacyNoGrants)
	reg, err = LoadRegistry(cfg)
	require.NoError(t, err)
	assert.False(t, reg.Find("legacy").Granted.Network)
}
