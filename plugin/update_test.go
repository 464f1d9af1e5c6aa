// SPDX-License-Identifier: MIT

package plugin

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

// updateTree is a plugin dir named "upd" declaring caps (TOML lines of [capabilities]).
func updateTree(t *testing.T, caps string) string {
	return writeTree(t, map[string]string{
		ManifestFile: "[plugin]\nname = \"upd\"\nprotocol = \"fledge-v1\"\n[[commands]]\nname = \"upd\"\nbinary = \"bin/upd\"\n" +
			"[capabilities]\nfilesystem = \"none\"\n" + caps,
		"bin/upd": "#!/bin/sh\n",
	})
}

// reinstallFrom puts src's files over the installed plugin's source dir (same source, a
// new version).
func reinstallFrom(t *testing.T, dst, src string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(dst))
	require.NoError(t, os.Mkdir(dst, 0o755))
	_, err := copyTree(src, dst)
	require.NoError(t, err)
}

// An update whose new version asks for more than the user decided on is never granted
// wholesale: --yes and --ni refuse it (nothing changes, on disk or in plugins.toml) and
// say what is new; a terminal asks each capability; --grant names exactly what to grant.
func TestUpdateYesGrantsNothingNew(t *testing.T) {
	cfg := t.TempDir()
	src := updateTree(t, "store = true\n")
	e, out, err := install(t, cfg, src, func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err, out)
	require.True(t, e.Granted.Store)

	reinstallFrom(t, src, updateTree(t, "store = true\nnetwork = true\n"))
	update := func(mod func(*InstallOptions)) (*Entry, string, error) {
		reg, err := LoadRegistry(cfg)
		require.NoError(t, err)
		old := *reg.Find("upd")
		return install(t, cfg, src, func(o *InstallOptions) {
			o.KeepGrants, o.PreviousAsked = &old.Granted, ApprovedAsked(cfg, &old)
			mod(o)
		})
	}
	for name, mod := range map[string]func(*InstallOptions){
		"yes": func(o *InstallOptions) { o.Yes = true },
		"ni":  func(o *InstallOptions) {},
	} {
		_, out, err := update(mod)
		require.ErrorIs(t, err, ErrUnapprovedChange, name)
		assert.Contains(t, err.Error(), "now asks for network", name)
		assert.NotContains(t, out, "Granting", name)
		reg, err := LoadRegistry(cfg)
		require.NoError(t, err)
		assert.Equal(t, e.Granted, reg.Find("upd").Granted, name)
		assert.Equal(t, e.ManifestSHA256, reg.Find("upd").ManifestSHA256, name)
		man, err := os.ReadFile(filepath.Join(Dir(cfg, "upd"), ManifestFile))
		require.NoError(t, err)
		assert.NotContains(t, string(man), "network", name)
		assertClean(t, cfg)
	}

	// On a terminal each capability is asked again, none granted by default.
	asker := &scriptedAsker{answers: []bool{true, false}}
	e2, out, err := update(func(o *InstallOptions) { o.NonInteractive = false; o.Asker = asker })
	require.NoError(t, err, out)
	require.Len(t, asker.questions, 2)
	assert.Contains(t, asker.questions[0], "Grant store")
	assert.Contains(t, asker.questions[1], "Grant network")
	assert.Equal(t, []bool{false, false}, asker.defaults)
	assert.False(t, e2.Granted.Network)
	assert.True(t, e2.Granted.Store)

	// --grant names exactly what to grant.
	reinstallFrom(t, src, updateTree(t, "store = true\nnetwork = true\nexec = true\n"))
	g := policy.Grants{Network: true, Store: true}
	e3, out, err := update(func(o *InstallOptions) { o.Yes = true; o.Grant = &g })
	require.NoError(t, err, out)
	assert.True(t, e3.Granted.Network && e3.Granted.Store && !e3.Granted.Exec, "%+v", e3.Granted)
}

// What the user decided on before is the approved manifest's declarations: a plugin.toml
// edited since counts for nothing, only the grants held do.
func TestApprovedAskedIgnoresAnEditedManifest(t *testing.T) {
	cfg := t.TempDir()
	src := updateTree(t, "store = true\nexec = true\n")
	e, out, err := install(t, cfg, src, func(o *InstallOptions) { o.Grant = &policy.Grants{Store: true} })
	require.NoError(t, err, out)
	assert.True(t, ApprovedAsked(cfg, e).Exec, "the approved manifest asked for exec (declined)")

	path := filepath.Join(Dir(cfg, "upd"), ManifestFile)
	man, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(man), "store = true", "store = true\nnetwork = true", 1)), 0o644))
	asked := ApprovedAsked(cfg, e)
	assert.Equal(t, e.Granted, asked)
	_, err = ApprovedManifest(cfg, e)
	assert.ErrorIs(t, err, ErrManifestChanged)
}

// An install hook runs with the staged plugin dir writable; the handshake fledge records
// there for a self-describing plugin is written after the hooks, so a hook can neither
// replace it nor plant one for a plugin that has none.
func TestInstallHookCannotReplaceRecordedHandshake(t *testing.T) {
	src := writeTree(t, map[string]string{
		ManifestFile: "[plugin]\nname = \"hs\"\n[[commands]]\nname = \"hs\"\nbinary = \"bin/hs\"\n" +
			"[hooks]\nforge = \"printf forged > " + HandshakeFile + "\"\n",
		"bin/hs": "#!/bin/sh\n",
	})
	runner := func(ctx context.Context, dir string, h Hook) error {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.Command)
		cmd.Dir = dir
		return cmd.Run()
	}
	for _, said := range []string{"recorded", ""} {
		cfg := t.TempDir()
		_, out, err := install(t, cfg, src, func(o *InstallOptions) {
			o.Yes, o.RunHooks, o.RunHook = true, true, runner
			o.Handshake = func(context.Context, string, *Manifest) ([]byte, error) {
				if said == "" {
					return nil, nil
				}
				return []byte(said), nil
			}
		})
		require.NoError(t, err, out)
		got, err := os.ReadFile(filepath.Join(Dir(cfg, "hs"), HandshakeFile))
		if said == "" {
			assert.ErrorIs(t, err, os.ErrNotExist, "a handshake the hook planted: %q", got)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, said, string(got))
	}
}

// The npm record is part of the entry in plugins.toml (round trip), and stays out of JSON
// output (an environment value may be a token).
func TestEntryNPMRecord(t *testing.T) {
	cfg := t.TempDir()
	rec := &NPMRequest{Package: "@x/srv", Version: "^1.2.0", Args: []string{"--root", "${FLEDGE_PROJECT_ROOT}"},
		Env: []string{"TOKEN=s3cret"}, Filesystem: policy.FilesystemNone}
	src := updateTree(t, "")
	_, out, err := install(t, cfg, src, func(o *InstallOptions) { o.Yes = true; o.NPM = rec })
	require.NoError(t, err, out)
	reg, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Equal(t, rec, reg.Find("upd").NPM)
	j, err := json.Marshal(reg.Find("upd"))
	require.NoError(t, err)
	assert.NotContains(t, string(j), "s3cret")
	// A grant change keeps it.
	_, _, err = ChangeGrants(cfg, "upd", func(_ *Manifest, cur policy.Grants) (policy.Change, error) {
		return policy.Change{Before: cur, After: cur}, nil
	})
	require.NoError(t, err)
	reg, err = LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Equal(t, rec, reg.Find("upd").NPM)
}

func TestNPMRequestChanges(t *testing.T) {
	prev := &NPMRequest{Package: "srv", Version: "^1", Args: []string{"a"}, Env: []string{"A=1"}, Filesystem: "none"}
	same := *prev
	assert.Empty(t, same.Changes(prev))
	next := same
	next.Env = []string{"A=1", "INJECTED=x"}
	next.Args = []string{"a", "--more"}
	next.Network = true
	ch := next.Changes(prev)
	assert.Equal(t, []string{`server arguments: "a" "--more" (was "a")`, `environment: "A=1" "INJECTED=x" (was "A=1")`,
		"network: true (was false)"}, ch)
	// Nothing trusted to compare with: everything is listed.
	assert.Len(t, same.Changes(nil), 7)
}
