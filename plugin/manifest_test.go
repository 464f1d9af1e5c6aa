// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

func TestLoadManifestFixture(t *testing.T) {
	m, warnings, err := LoadManifest("testdata/hello")
	require.NoError(t, err)
	assert.Equal(t, "hello", m.Plugin.Name)
	assert.Equal(t, "0.1.0", m.Plugin.Version)
	assert.True(t, m.IsProtocol())
	assert.Equal(t, []string{"hello", "hello-loud"}, m.CommandNames())
	assert.Equal(t, "bin/hello", m.Command("hello-loud").Binary)
	assert.Nil(t, m.Command("nope"))
	assert.Equal(t, policy.Grants{Exec: true, Store: true, Filesystem: "project"}, m.Declared())
	assert.Equal(t, []Hook{{Name: "build", Command: "make"}, {Name: "post_install", Command: "echo one && echo two"}}, m.HookList())
	assert.Equal(t, []string{
		`plugin.toml: unknown key "commands.future_field" ignored`,
		`plugin.toml: unknown key "extra" ignored`,
	}, warnings)
	raw, err := os.ReadFile("testdata/hello/plugin.toml")
	require.NoError(t, err)
	assert.Equal(t, raw, m.Raw())
	assert.Len(t, m.SHA256(), 64)

	legacy, warnings, err := LoadManifest("testdata/legacy")
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.False(t, legacy.IsProtocol())
	assert.Equal(t, policy.Grants{Filesystem: "none"}, legacy.Declared())
}

const okHead = "[plugin]\nname = \"p\"\n"
const okCmd = "[[commands]]\nname = \"c\"\nbinary = \"bin/c\"\n"

func TestParseManifestErrors(t *testing.T) {
	cases := []struct {
		name, src string
		is        error
		msg       string
	}{
		{"syntax", "[plugin\nname=", ErrInvalidManifest, "line 2: expected"},
		{"unknown runtime", okHead + "runtime = \"jvm\"\nprotocol = \"fledge-v1\"\n" + okCmd, ErrInvalidManifest, `runtime = "jvm"`},
		{"wasm without protocol", okHead + "runtime = \"wasm\"\n" + okCmd, ErrInvalidManifest, `needs protocol = "fledge-v1"`},
		{"wrong type", okHead + okCmd + "[capabilities]\nexec = \"yes\"\n", ErrInvalidManifest, "capabilities.exec"},
		{"missing name", "[plugin]\nversion = \"1\"\n" + okCmd, ErrInvalidManifest, "[plugin] name is missing"},
		{"uppercase name", "[plugin]\nname = \"Hello\"\n" + okCmd, ErrInvalidManifest, `name "Hello" must match`},
		{"path name", "[plugin]\nname = \"../../etc\"\n" + okCmd, ErrInvalidManifest, "must match"},
		{"dot name", "[plugin]\nname = \".hidden\"\n" + okCmd, ErrInvalidManifest, "must match"},
		{"leading dash", "[plugin]\nname = \"-rf\"\n" + okCmd, ErrInvalidManifest, "must match"},
		{"long name", "[plugin]\nname = \"" + strings.Repeat("a", 65) + "\"\n" + okCmd, ErrInvalidManifest, "at most 64"},
		{"nul in name", "[plugin]\nname = \"a\\u0000b\"\n" + okCmd, ErrInvalidManifest, "must match"},
		{"protocol v2", "[plugin]\nname = \"p\"\nprotocol = \"fledge-v2\"\n" + okCmd, ErrUnsupportedProtocol, "upgrade fledge"},
		{"no commands", okHead, ErrInvalidManifest, "no [[commands]]"},
		{"bad command name", okHead + "[[commands]]\nname = \"a b\"\nbinary = \"x\"\n", ErrInvalidManifest, `command 1: name "a b"`},
		{"reserved command", okHead + "[[commands]]\nname = \"plugins\"\nbinary = \"x\"\n", ErrInvalidManifest, "fledge's own commands"},
		{"duplicate command", okHead + okCmd + okCmd, ErrInvalidManifest, "declared twice"},
		{"absolute binary", okHead + "[[commands]]\nname = \"c\"\nbinary = \"/bin/sh\"\n", ErrInvalidManifest, "must be relative"},
		{"escaping binary", okHead + "[[commands]]\nname = \"c\"\nbinary = \"bin/../../x\"\n", ErrInvalidManifest, "escapes the plugin dir"},
		{"missing binary", okHead + "[[commands]]\nname = \"c\"\n", ErrInvalidManifest, "binary is missing"},
		{"bad filesystem", okHead + okCmd + "[capabilities]\nfilesystem = \"home\"\n", ErrInvalidManifest, `filesystem = "home"`},
		{"terminal escape in description", "[plugin]\nname = \"p\"\ndescription = \"\\u001b]0;pwned\\u0007\"\n" + okCmd, ErrInvalidManifest, "control characters"},
		{"escape in hook", okHead + okCmd + "[hooks]\nbuild = \"make\\u001b[2J\"\n", ErrInvalidManifest, "control characters"},
		{"too large", okHead + okCmd + "#" + strings.Repeat("x", MaxManifestBytes), ErrInvalidManifest, "more than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseManifest([]byte(tc.src))
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// Keys and sections a newer host may read stay warnings: the manifest still installs.
func TestParseManifestUnknownKeysAreWarnings(t *testing.T) {
	src := "shiny = true\n" + okHead + okCmd + "icon = \"x\"\n[capabilities]\nexec = true\n[ui]\ntheme = \"dark\"\n[ui.colors]\nfg = 1\n[[tools]]\nname = \"t\"\nicon = 1\n[compatibility]\nhosts = 1\n"
	m, warnings, err := ParseManifest([]byte(src))
	require.NoError(t, err)
	assert.True(t, m.Capabilities.Exec)
	assert.Equal(t, []string{
		`plugin.toml: unknown key "shiny" ignored`,
		`plugin.toml: unknown key "commands.icon" ignored`,
		`plugin.toml: unknown key "ui" ignored`,
		`plugin.toml: unknown key "tools.icon" ignored`,
		`plugin.toml: unknown key "compatibility" ignored`,
	}, warnings)
}

// A typo that would change what the plugin is or may do is an error naming the closest
// known name: protcol = "fledge-v1" would install a legacy plugin, [capabilites] one with
// no capabilities.
func TestManifestTyposAreErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, msg string }{
		{"protocol key", "[plugin]\nname = \"p\"\nprotcol = \"fledge-v1\"\n" + okCmd, "[plugin] protcol: unknown key (did you mean protocol?)"},
		{"unknown plugin key", okHead + "shiny = true\n" + okCmd, "[plugin] shiny: unknown key (known: author, description, name, protocol, runtime, timeout, transport, version)"},
		{"capability key", okHead + okCmd + "[capabilities]\nnetwrok = true\n", "[capabilities] netwrok: unknown key (did you mean network?)"},
		{"unknown capability", okHead + okCmd + "[capabilities]\nteleport = true\n", "[capabilities] teleport: unknown key (known: exec, filesystem, metadata, network, secrets, store)"},
		{"capabilities section", okHead + okCmd + "[capabilites]\nexec = true\n", "unknown section [capabilites] (did you mean [capabilities]?)"},
		{"plugin section", "[plugn]\nname = \"p\"\n" + okCmd, "unknown section [plugn] (did you mean [plugin]?)"},
		{"commands section", okHead + "[[comands]]\nname = \"c\"\nbinary = \"bin/c\"\n", "unknown section [comands] (did you mean [commands]?)"},
		{"hooks section", okHead + okCmd + "[hook]\nbuild = \"make\"\n", "unknown section [hook] (did you mean [hooks]?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseManifest([]byte(tc.src))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidManifest)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// A binary that is not there is said in words, with the file it was probably meant to be,
// never as the system call that failed ("statat mian.sh: no such file or directory").
func TestMissingBinaryInWords(t *testing.T) {
	dir := writeTree(t, map[string]string{ManifestFile: okHead + "[[commands]]\nname = \"c\"\nbinary = \"mian.sh\"\n", "main.sh": "#!/bin/sh\n"})
	_, _, err := LoadManifest(dir)
	require.ErrorIs(t, err, ErrMissingBinary)
	assert.Contains(t, err.Error(), `binary "mian.sh" does not exist in the plugin dir (did you mean main.sh?)`)
	assert.NotContains(t, err.Error(), "statat")
	assert.NotContains(t, err.Error(), "no such file")

	dir = writeTree(t, map[string]string{"README": "x"})
	_, _, err = LoadManifest(dir)
	require.ErrorIs(t, err, ErrInvalidManifest)
	assert.Contains(t, err.Error(), "plugin.toml does not exist in the plugin dir")
	assert.NotContains(t, err.Error(), "openat")
}

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o755))
	}
	return dir
}

func TestLoadManifestBinaryChecks(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "evil"), []byte("#!/bin/sh\n"), 0o755))

	t.Run("binary symlink leaving the dir", func(t *testing.T) {
		dir := writeTree(t, map[string]string{ManifestFile: okHead + okCmd})
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
		require.NoError(t, os.Symlink(filepath.Join(outside, "evil"), filepath.Join(dir, "bin/c")))
		_, _, err := LoadManifest(dir)
		require.ErrorIs(t, err, ErrInvalidManifest)
		assert.Contains(t, err.Error(), `binary "bin/c"`)
	})
	t.Run("dir symlink leaving the dir", func(t *testing.T) {
		dir := writeTree(t, map[string]string{ManifestFile: okHead + okCmd})
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, "bin")))
		require.NoError(t, os.Rename(filepath.Join(outside, "evil"), filepath.Join(outside, "c")))
		defer os.Rename(filepath.Join(outside, "c"), filepath.Join(outside, "evil"))
		_, _, err := LoadManifest(dir)
		require.ErrorIs(t, err, ErrInvalidManifest)
	})
	t.Run("symlink inside is fine", func(t *testing.T) {
		dir := writeTree(t, map[string]string{ManifestFile: okHead + okCmd, "real/c": "#!/bin/sh\n"})
		require.NoError(t, os.Symlink("../real/c", filepath.Join(dir, "bin")+"_"))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
		require.NoError(t, os.Symlink("../real/c", filepath.Join(dir, "bin/c")))
		_, _, err := LoadManifest(dir)
		require.NoError(t, err)
	})
	t.Run("binary missing", func(t *testing.T) {
		dir := writeTree(t, map[string]string{ManifestFile: okHead + okCmd})
		_, _, err := LoadManifest(dir)
		require.ErrorIs(t, err, ErrInvalidManifest)
		assert.Contains(t, err.Error(), "bin/c")
	})
	t.Run("binary is a directory", func(t *testing.T) {
		dir := writeTree(t, map[string]string{ManifestFile: okHead + okCmd, "bin/c/x": ""})
		_, _, err := LoadManifest(dir)
		require.ErrorIs(t, err, ErrInvalidManifest)
		assert.Contains(t, err.Error(), "not a regular file")
	})
	t.Run("not executable warns", func(t *testing.T) {
		dir := writeTree(t, map[string]string{ManifestFile: okHead + okCmd, "bin/c": ""})
		require.NoError(t, os.Chmod(filepath.Join(dir, "bin/c"), 0o644))
		_, warnings, err := LoadManifest(dir)
		require.NoError(t, err)
		assert.Contains(t, warnings, `command "c": binary "bin/c" is not executable`)
	})
	t.Run("no plugin.toml", func(t *testing.T) {
		_, _, err := LoadManifest(t.TempDir())
		require.ErrorIs(t, err, ErrInvalidManifest)
	})
}

func FuzzParseManifest(f *testing.F) {
	for _, p := range []string{"testdata/hello/plugin.toml", "testdata/legacy/plugin.toml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(okHead + okCmd))
	f.Add([]byte("[plugin]\nname = \"x\"\nprotocol = \"fledge-v9\"\n"))
	f.Add([]byte("[[commands]]\nname=1\n[hooks]\nx=[1,{a=2}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, warnings, err := ParseManifest(data)
		assert.LessOrEqual(t, len(warnings), 33)
		if err != nil {
			require.Nil(t, m)
			require.True(t, errors.Is(err, ErrInvalidManifest) || errors.Is(err, ErrUnsupportedProtocol), "unclassified error: %v", err)
			require.Less(t, len(err.Error()), 2048, "error messages stay short")
			return
		}
		// Whatever parses is safe to use as path components and to print.
		require.True(t, ValidName(m.Plugin.Name))
		for _, c := range m.Commands {
			require.True(t, ValidName(c.Name))
			require.True(t, filepath.IsLocal(c.Binary), c.Binary)
		}
		require.True(t, policy.ValidFilesystem(m.Capabilities.Filesystem))
		require.LessOrEqual(t, len(data), MaxManifestBytes)
		_ = m.HookList()
	})
}

func TestWasmManifest(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), []byte(okHead+"protocol = \"fledge-v1\"\nruntime = \"wasm\"\n[[commands]]\nname = \"c\"\nbinary = \"c.wasm\"\n"), 0o644))
	// A module is data, not a program: no executable bit, and no warning about it.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	m, warnings, err := LoadManifest(dir)
	require.NoError(t, err)
	assert.True(t, m.IsWasm())
	assert.True(t, m.IsProtocol())
	assert.Empty(t, warnings)
}
