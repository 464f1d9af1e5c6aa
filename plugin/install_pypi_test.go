// SPDX-License-Identifier: MIT

package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePackageSourcePyPI(t *testing.T) {
	kind, pkg, ver, err := ParsePackageSource("pypi:mcp-server-time==2025.1.2")
	require.NoError(t, err)
	assert.Equal(t, []string{"pypi", "mcp-server-time", "2025.1.2"}, []string{kind, pkg, ver})
	_, pkg, ver, err = ParsePackageSource("pypi:mcp_server_fetch")
	require.NoError(t, err)
	assert.Equal(t, []string{"mcp_server_fetch", ""}, []string{pkg, ver})
	assert.Equal(t, "mcp-server-fetch", NormalizePyPI("MCP_Server.Fetch"))
}

func TestPyPIRequestCheck(t *testing.T) {
	for _, bad := range []PyPIRequest{
		{Package: "-r/etc/passwd"}, {Package: "ok", Version: "--index-url=http://x"}, {Package: "ok", Version: ">=1"},
		{Package: "ok", Python: "python3"}, {Package: "ok", Bin: "a b"}, {Package: "ok", Env: []string{"PATH=/x"}},
	} {
		assert.ErrorIs(t, bad.Check(), ErrBadSource, "%+v", bad)
	}
	assert.NoError(t, (&PyPIRequest{Package: "mcp-server-time", Version: "2025.1.2rc1", Python: "/usr/bin/python3"}).Check())
}

func TestParseConsoleScripts(t *testing.T) {
	got := parseConsoleScripts([]byte("[gui_scripts]\ng = m:f\n\n[console_scripts]\nmcp-server-time = mcp_server_time:main\nother=pkg.cli:app.run [extra]\n# c\n"))
	assert.Equal(t, map[string]string{"mcp-server-time": "mcp_server_time:main", "other": "pkg.cli:app.run"}, got)
}

func TestSamePins(t *testing.T) {
	a := Wheel{Name: "a", Version: "1", SHA256: "aa"}
	b := Wheel{Name: "b", Version: "2", SHA256: "bb"}
	assert.NoError(t, samePins([]Wheel{a, b}, []Wheel{b, a}))
	evil := b
	evil.SHA256 = "cc"
	assert.ErrorIs(t, samePins([]Wheel{a, b}, []Wheel{a, evil}), ErrWheelMismatch)
	assert.ErrorIs(t, samePins([]Wheel{a}, []Wheel{a, b}), ErrWheelMismatch, "an extra distribution")
	assert.ErrorIs(t, samePins([]Wheel{a, b}, []Wheel{a}), ErrWheelMismatch, "a missing one")
}

func TestResolvePythonRefusesHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	link := filepath.Join(home, "python3")
	require.NoError(t, os.Symlink("/bin/sh", link))
	_, err := ResolvePython(link)
	assert.ErrorIs(t, err, ErrPythonInHome)
	out := filepath.Join(t.TempDir(), "py")
	require.NoError(t, os.Symlink(link, out))
	_, err = ResolvePython(out)
	assert.ErrorIs(t, err, ErrPythonInHome, "a link outside $HOME leading into it")
}

// TreeDigest: the same files give the same digest whatever their times or other mode bits;
// content, an executable bit, a new file or a link target change it; data/ and state.json
// (the plugin's own, written at run time) do not.
func TestTreeDigest(t *testing.T) {
	mk := func() string {
		d := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(d, "lib", "p"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "lib", "p", "x.py"), []byte("x"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "run"), []byte("#!/bin/sh"), 0o755))
		require.NoError(t, os.Symlink("lib/p/x.py", filepath.Join(d, "link")))
		return d
	}
	a, b := mk(), mk()
	da, err := TreeDigest(a)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(filepath.Join(b, "lib", "p", "x.py"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(b, "data"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(b, "data", "db"), []byte("state"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(b, StateFile), []byte("{}"), 0o600))
	db, err := TreeDigest(b)
	require.NoError(t, err)
	assert.Equal(t, da, db)
	assert.NoError(t, VerifyDigest(b, da))

	for name, change := range map[string]func(d string){
		"content":  func(d string) { os.WriteFile(filepath.Join(d, "lib", "p", "x.py"), []byte("y"), 0o644) },
		"exec bit": func(d string) { os.Chmod(filepath.Join(d, "run"), 0o644) },
		"new file": func(d string) { os.WriteFile(filepath.Join(d, "lib", "p", "evil.pth"), nil, 0o644) },
		"link":     func(d string) { os.Remove(filepath.Join(d, "link")); os.Symlink("run", filepath.Join(d, "link")) },
	} {
		c := mk()
		change(c)
		assert.ErrorIs(t, VerifyDigest(c, da), ErrDigestMismatch, name)
	}
}

func TestReadLockRefusesBadEntries(t *testing.T) {
	dir := t.TempDir()
	good := LockEntry{Name: "x", Source: "pypi:x", Version: "1", Digest: "sha256:" + string(make64('a'))}
	require.NoError(t, WriteLock(dir, &Lock{Plugins: []LockEntry{good}}))
	l, err := ReadLock(dir)
	require.NoError(t, err)
	assert.Equal(t, "x", l.Plugins[0].Name)
	for name, le := range map[string]LockEntry{
		"digest":  {Name: "x", Source: "pypi:x", Digest: "md5:00"},
		"name":    {Name: "../x", Source: "pypi:x", Digest: good.Digest},
		"package": {Name: "x", Source: "pypi:x", Digest: good.Digest, PyPI: &PyPIRequest{Package: "-e.", Version: "1"}},
	} {
		require.NoError(t, WriteLock(dir, &Lock{Plugins: []LockEntry{le}}))
		_, err := ReadLock(dir)
		assert.ErrorIs(t, err, ErrBadLock, name)
	}
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}
