// SPDX-License-Identifier: MIT

package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dirLookup is Lookup on a real (temporary) tree, as core's OSLookup.
type dirLookup struct{}

func (dirLookup) Exists(p string) bool { _, err := os.Lstat(p); return err == nil }
func (dirLookup) RegularFile(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().IsRegular()
}
func (dirLookup) Resolve(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}
func (dirLookup) FirstEntry(d string) string {
	es, err := os.ReadDir(d)
	if err != nil || len(es) == 0 {
		return ""
	}
	return es[0].Name()
}

// tree creates files (dirs when the name ends in /) under root.
func tree(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if f[len(f)-1] == '/' {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	}
}

// TestDetectVersionManagers: each manager is found from the PATH entry its setup puts
// there (shims, a version's bin dir), with its install tree as the root, and nothing else in
// $HOME is.
func TestDetectVersionManagers(t *testing.T) {
	home := t.TempDir()
	j := func(p string) string { return filepath.Join(home, p) }
	tree(t, home,
		".pyenv/libexec/pyenv", ".pyenv/shims/python3", ".pyenv/versions/3.12.1/bin/python3",
		".rbenv/libexec/rbenv", ".rbenv/shims/ruby",
		".nvm/nvm.sh", ".nvm/versions/node/v20.11.0/bin/node",
		".asdf/asdf.sh", ".asdf/installs/", ".asdf/plugins/", ".asdf/shims/node",
		".local/share/mise/installs/", ".local/bin/mise",
		".volta/bin/volta-shim", ".volta/tools/",
		".tool-versions", ".config/mise/config.toml",
		"bin/mytool", ".ssh/id_ed25519",
	)
	require.NoError(t, os.MkdirAll(j(".local/share/mise/shims"), 0o755))
	require.NoError(t, os.Symlink(j(".local/bin/mise"), j(".local/share/mise/shims/python")))
	require.NoError(t, os.Symlink(j(".volta/bin/volta-shim"), j(".volta/bin/node")))

	path := []string{
		"/usr/bin", j("bin"), j(".pyenv/shims"), j(".rbenv/shims"), j(".nvm/versions/node/v20.11.0/bin"),
		j(".asdf/shims"), j(".local/share/mise/shims"), j(".volta/bin"), j(".pyenv/versions/3.12.1/bin"),
	}
	vms := DetectVersionManagers(path, home, dirLookup{})
	got := map[string]VersionManager{}
	for _, vm := range vms {
		got[vm.Name] = vm
	}
	require.Len(t, vms, 6, "%+v", vms)
	for name, root := range map[string]string{
		"pyenv": ".pyenv", "rbenv": ".rbenv", "nvm": ".nvm", "asdf": ".asdf", "mise": ".local/share/mise", "volta": ".volta",
	} {
		assert.Equal(t, j(root), got[name].Root, name)
	}
	assert.Equal(t, j(".pyenv/shims"), got["pyenv"].PATHEntry, "the first PATH entry of a manager names it")
	assert.Equal(t, []string{j(".local/bin/mise")}, got["mise"].ReadExec, "mise's shims are symlinks to mise")
	assert.Equal(t, []string{j(".tool-versions")}, got["mise"].ReadOnly, "not ~/.config/mise: its [env] holds secrets")
	assert.Equal(t, []string{j(".tool-versions")}, got["asdf"].ReadOnly)

	// Into a profile: each tree read+execute for execs and the plugin, never $HOME or ~/.ssh.
	p := Paths{Home: home, UserPATH: path, VersionManagers: vms, ConfigDir: j(".config/fledge"), StateDir: j(".local/state/fledge")}
	for name, a := range map[string]struct{ re, ro []string }{
		"exec":   {ExecAccess(p, nil).ReadExec, ExecAccess(p, nil).ReadOnly},
		"plugin": {PluginAccess(p, Grants{}, nil).ReadExec, PluginAccess(p, Grants{}, nil).ReadOnly},
	} {
		for _, root := range []string{".pyenv", ".rbenv", ".nvm", ".asdf", ".local/share/mise", ".volta", ".local/bin/mise"} {
			assert.Contains(t, a.re, j(root), name)
		}
		assert.Contains(t, a.ro, j(".tool-versions"), name)
		assert.NotContains(t, append(a.re, a.ro...), j(".config/mise"), name)
		for _, x := range append(a.re, a.ro...) {
			assert.False(t, Within(home, x), "%s: %s covers $HOME", name, x)
			assert.False(t, Within(x, j(".ssh")), "%s: %s", name, x)
		}
	}
}

// TestDetectVersionManagersNegative: a plain bin dir in $HOME, a tree whose root would be
// $HOME itself, and a "manager" inside a sensitive dir are never granted.
func TestDetectVersionManagersNegative(t *testing.T) {
	home := t.TempDir()
	j := func(p string) string { return filepath.Join(home, p) }
	tree(t, home, "bin/tool", "libexec/pyenv", "shims/python3", ".ssh/pyenv/libexec/pyenv", ".ssh/pyenv/shims/x")
	path := []string{j("bin"), j("shims"), j(".ssh/pyenv/shims")}
	vms := DetectVersionManagers(path, home, dirLookup{})
	for _, vm := range vms {
		assert.NotEqual(t, home, vm.Root, "$HOME is never a manager root")
	}
	p := Paths{Home: home, UserPATH: path, VersionManagers: vms}
	for _, x := range ExecAccess(p, nil).ReadExec {
		assert.False(t, Within(x, j(".ssh")), "%s is inside ~/.ssh", x)
		assert.NotEqual(t, home, x)
	}
	assert.Empty(t, DetectVersionManagers([]string{"/usr/bin", "/bin"}, home, dirLookup{}))
}

// TestVersionFilesAbove: pyenv's .python-version in the working dir and its parents is
// readable (and only such files: a symlink named like one is not).
func TestVersionFilesAbove(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "work/.python-version", "work/proj/sub/", "secret")
	require.NoError(t, os.Symlink(filepath.Join(root, "secret"), filepath.Join(root, "work/proj/.python-version")))
	vms := []VersionManager{{Name: "pyenv", VersionFiles: []string{".python-version"}}}
	got := VersionFilesFor(filepath.Join(root, "work/proj/sub"), vms, dirLookup{})
	assert.Equal(t, []string{filepath.Join(root, "work/.python-version")}, got)
}

// TestReadOnlyToolchainIsExecutable: a read_only entry that holds a PATH entry (the README's
// read_only = ["~/.pyenv"]) is read+execute for execs and reaches the plugin process; other
// read_only entries stay read-only and commands-only.
func TestReadOnlyToolchainIsExecutable(t *testing.T) {
	c := &Config{}
	c.Sandbox.ReadOnly = []string{"/home/u/.mytool", "/srv/data"}
	p := Paths{Home: "/home/u", UserPATH: []string{"/home/u/.mytool/shims", "/usr/bin"}}
	ex := ExecAccess(p, c)
	assert.Contains(t, ex.ReadExec, "/home/u/.mytool")
	assert.NotContains(t, ex.ReadOnly, "/home/u/.mytool")
	assert.Contains(t, ex.ReadOnly, "/srv/data")
	assert.NotContains(t, ex.ReadExec, "/srv/data")
	pl := PluginAccess(p, Grants{}, c)
	assert.Contains(t, pl.ReadExec, "/home/u/.mytool")
	for _, l := range [][]string{pl.ReadExec, pl.ReadOnly, pl.ReadWrite} {
		assert.NotContains(t, l, "/srv/data", "a plain read_only path stays commands-only")
	}
}
