// SPDX-License-Identifier: MIT

package plugin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

func TestRegistryRoundTrip(t *testing.T) {
	cfg := t.TempDir()
	r, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Empty(t, r.Plugins)
	e := Entry{Name: "b", Source: "/src/b", Version: "1", Installed: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Commands: []string{"bee"}, Granted: policy.Grants{Exec: true, Filesystem: "plugin"}, ManifestSHA256: "ab", Protocol: "fledge-v1"}
	r.Put(e)
	r.Put(Entry{Name: "a", Commands: []string{"ay"}, Granted: policy.Grants{Filesystem: "none"}})
	require.NoError(t, r.Save())
	assertNoTempFiles(t, cfg)

	r2, err := LoadRegistry(cfg)
	require.NoError(t, err)
	require.Len(t, r2.Plugins, 2)
	assert.Equal(t, "a", r2.Plugins[0].Name, "saved sorted")
	assert.Equal(t, e, *r2.Find("b"))
	assert.Nil(t, r2.Find("c"))
	assert.True(t, r2.Delete("a"))
	assert.False(t, r2.Delete("a"))
	e.Version = "2"
	r2.Put(e)
	assert.Len(t, r2.Plugins, 1)
	assert.Equal(t, "2", r2.Find("b").Version)
}

func TestRegistryCorrupt(t *testing.T) {
	cases := map[string]string{
		"syntax":         "[[plugins]\nname=",
		"bad name":       "[[plugins]]\nname = \"../etc\"\n",
		"duplicate":      "[[plugins]]\nname = \"a\"\n[[plugins]]\nname = \"a\"\n",
		"shared command": "[[plugins]]\nname = \"a\"\ncommands = [\"x\"]\n[[plugins]]\nname = \"b\"\ncommands = [\"x\"]\n",
		"bad filesystem": "[[plugins]]\nname = \"a\"\n[plugins.granted]\nfilesystem = \"root\"\n",
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(cfg, RegistryFile), []byte(src), 0o600))
			_, err := LoadRegistry(cfg)
			require.ErrorIs(t, err, ErrCorruptRegistry)
			got, _ := os.ReadFile(filepath.Join(cfg, RegistryFile))
			assert.Equal(t, src, string(got), "never rewritten")
		})
	}
}

func TestRegistrySymlinkNotFollowed(t *testing.T) {
	cfg := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim.toml")
	const orig = "[[plugins]]\nname = \"victim\"\n"
	require.NoError(t, os.WriteFile(victim, []byte(orig), 0o600))
	path := filepath.Join(cfg, RegistryFile)
	require.NoError(t, os.Symlink(victim, path))

	_, err := LoadRegistry(cfg)
	require.ErrorIs(t, err, ErrUnsafeFile)

	// A registry loaded before the link was planted replaces the link on save.
	require.NoError(t, os.Remove(path))
	r, err := LoadRegistry(cfg)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(victim, path))
	r.Put(Entry{Name: "mine", Granted: policy.Grants{Exec: true}})
	require.NoError(t, r.Save())
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, orig, string(got), "link target unchanged")
	st, err := os.Lstat(path)
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular())
	r2, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.True(t, r2.Find("mine").Granted.Exec)
}

func TestRegistryTooLarge(t *testing.T) {
	cfg := t.TempDir()
	f, err := os.Create(filepath.Join(cfg, RegistryFile))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxRegistryBytes+1))
	require.NoError(t, f.Close())
	_, err = LoadRegistry(cfg)
	require.ErrorIs(t, err, ErrTooLarge)
}
