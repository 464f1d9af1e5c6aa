// SPDX-License-Identifier: MIT

//go:build unix

package pathguard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testTree struct {
	tmp, root, outside string
}

// buildTree makes tmp/{root,outside} with every kind of entry the table needs.
func buildTree(t testing.TB) testTree {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	tr := testTree{tmp: tmp, root: filepath.Join(tmp, "root"), outside: filepath.Join(tmp, "outside")}
	for _, d := range []string{"root/a/b", "root/deep/1/2/3", "outside/x"} {
		require.NoError(t, os.MkdirAll(filepath.Join(tmp, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(tr.root, "file.txt"), []byte("x"), 0o644))
	links := map[string]string{
		"link_in":        "a",                         // stays inside: followed
		"a/link_parent":  "..",                        // back to the root: followed
		"a/link_sib":     "../deep/1",                 // sideways inside: followed
		"link_chain":     "link_in/link_sib/2",        // links through links, all inside
		"link_etc":       "/etc",                      // absolute, outside
		"link_abs_in":    filepath.Join(tr.root, "a"), // absolute, even though it points inside
		"link_up":        "../../../../../../../..",
		"link_out":       "../outside",
		"a/link_out2":    "../../outside/x",
		"loop1":          "loop2",
		"loop2":          "loop1",
		"self":           "self",
		"link_cwd":       "/proc/self/cwd",
		"link_proc_root": "/proc/self/root",
		"link_rel_proc":  "../../../../../../../../../../proc/self/cwd",
		"link_file":      "file.txt",
		"link_missing":   "nowhere",
	}
	for name, target := range links {
		require.NoError(t, os.Symlink(target, filepath.Join(tr.root, name)))
	}
	return tr
}

func newGuard(t testing.TB, mode string, roots ...string) *Guard {
	t.Helper()
	g, err := New(roots...)
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	setMode(t, g, mode)
	return g
}

func statID(t testing.TB, p string) (uint64, uint64) {
	t.Helper()
	fi, err := os.Stat(p)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return uint64(st.Dev), uint64(st.Ino)
}

func TestResolveTable(t *testing.T) {
	for _, mode := range testModes {
		t.Run(mode, func(t *testing.T) {
			tr := buildTree(t)
			g := newGuard(t, mode, tr.root)
			cases := []struct {
				name, req string
				want      string // directory expected (relative to tmp) when allowed
				reason    Reason
			}{
				{"empty is base", "", "root", ""},
				{"dot is base", ".", "root", ""},
				{"plain", "a/b", "root/a/b", ""},
				{"trailing slash", "a/b/", "root/a/b", ""},
				{"dotdot inside", "a/../a/b", "root/a/b", ""},
				{"symlink inside", "link_in/b", "root/a/b", ""},
				{"symlink to parent inside", "a/link_parent/deep", "root/deep", ""},
				{"symlink chain inside", "link_chain/3", "root/deep/1/2/3", ""},
				{"absolute inside", tr.root + "/a/b", "root/a/b", ""},
				{"absolute root", tr.root, "root", ""},
				{"absolute with dot and slashes", tr.root + "//./a/./b", "root/a/b", ""},
				{"dotdot twice", "../..", "", ReasonDotDotEscape},
				{"dotdot after dir", "a/../../x", "", ReasonDotDotEscape},
				{"dotdot out and back in", "../root/a", "", ReasonDotDotEscape},
				{"absolute dotdot out", tr.root + "/a/../../outside", "", ReasonDotDotEscape},
				{"absolute outside", tr.outside, "", ReasonOutsideRoots},
				{"absolute etc", "/etc", "", ReasonOutsideRoots},
				{"slash", "/", "", ReasonOutsideRoots},
				{"root name prefix is not a root", tr.root + "x", "", ReasonOutsideRoots},
				{"symlink to etc", "link_etc", "", ReasonSymlinkEscape},
				{"symlink to etc nested", "link_etc/ssl", "", ReasonSymlinkEscape},
				{"absolute symlink back inside", "link_abs_in", "", ReasonSymlinkEscape},
				{"relative symlink climbing out", "link_up", "", ReasonSymlinkEscape},
				{"relative symlink to sibling", "link_out/x", "", ReasonSymlinkEscape},
				{"nested relative symlink out", "a/link_out2", "", ReasonSymlinkEscape},
				{"symlink loop", "loop1", "", ReasonInvalid},
				{"self loop", "self/x", "", ReasonInvalid},
				{"magic link cwd", "link_cwd", "", ReasonMagicLink},
				{"magic link root", "link_proc_root", "", ReasonMagicLink},
				{"magic link root nested", "link_proc_root/etc", "", ReasonMagicLink},
				{"relative climb to proc", "link_rel_proc", "", ReasonMagicLink},
				{"nul byte", "a\x00b", "", ReasonNULByte},
				{"5000 bytes", strings.Repeat("a/", 2500), "", ReasonTooLong},
				{"component too long", strings.Repeat("n", 300), "", ReasonTooLong},
				{"file", "file.txt", "", ReasonNotDirectory},
				{"through a file", "file.txt/x", "", ReasonNotDirectory},
				{"symlink to file", "link_file", "", ReasonNotDirectory},
				{"missing", "missing", "", ReasonNotFound},
				{"missing nested", "a/missing/b", "", ReasonNotFound},
				{"dangling symlink", "link_missing", "", ReasonNotFound},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					d, err := g.Resolve(tc.req)
					if tc.reason == "" {
						require.NoError(t, err)
						defer d.Close()
						dev, ino := statID(t, filepath.Join(tr.tmp, tc.want))
						assert.Equal(t, dev, d.Dev)
						assert.Equal(t, ino, d.Ino)
						assert.Equal(t, tr.root, d.Root)
						require.NoError(t, Verify(d.File, d.Dev, d.Ino))
						assert.Equal(t, filepath.Join(tr.tmp, tc.want), d.Path)
						checkMode(t, g, mode)
						return
					}
					require.Error(t, err)
					require.Nil(t, d)
					var pe *Error
					require.ErrorAs(t, err, &pe)
					assert.Equal(t, tc.reason, pe.Reason, "%v", err)
					assert.Equal(t, tc.req, pe.Request)
					assert.ErrorIs(t, err, ErrRefused)
					assert.Contains(t, err.Error(), string(tc.reason))
					assert.Contains(t, err.Error(), tc.reason.Words())
					assert.Less(t, len(err.Error()), 1024, "error text is bounded")
					checkMode(t, g, mode)
				})
			}
		})
	}
}

func TestRootIsSymlink(t *testing.T) {
	for _, mode := range testModes {
		t.Run(mode, func(t *testing.T) {
			tr := buildTree(t)
			link := filepath.Join(tr.tmp, "rootlink")
			require.NoError(t, os.Symlink("root", link))
			g := newGuard(t, mode, link)
			assert.Equal(t, []string{link}, g.Roots())
			dev, ino := statID(t, filepath.Join(tr.root, "a"))
			for _, req := range []string{"a", link + "/a", tr.root + "/a"} {
				d, err := g.Resolve(req)
				require.NoError(t, err, req)
				assert.Equal(t, [2]uint64{dev, ino}, [2]uint64{d.Dev, d.Ino}, req)
				assert.Equal(t, link+"/a", d.Path, "display path is spelled under the configured root")
				assert.Equal(t, link, d.Root)
				d.Close()
			}
			_, err := g.Resolve("../root/a")
			assertReason(t, err, ReasonDotDotEscape)
		})
	}
}

func TestMultipleRoots(t *testing.T) {
	for _, mode := range testModes {
		t.Run(mode, func(t *testing.T) {
			tr := buildTree(t)
			plugin := filepath.Join(tr.tmp, "plugin")
			require.NoError(t, os.MkdirAll(filepath.Join(plugin, "bin"), 0o755))
			g := newGuard(t, mode, tr.root, plugin)
			assert.Equal(t, []string{tr.root, plugin}, g.Roots())

			d, err := g.Resolve(plugin + "/bin")
			require.NoError(t, err)
			assert.Equal(t, plugin, d.Root)
			assert.Equal(t, plugin+"/bin", d.Path)
			d.Close()

			// Relative requests only ever start at roots[0].
			_, err = g.Resolve("bin")
			assertReason(t, err, ReasonNotFound)
			_, err = g.Resolve("../plugin/bin")
			assertReason(t, err, ReasonDotDotEscape)
			_, err = g.Resolve(tr.outside)
			assertReason(t, err, ReasonOutsideRoots)
		})
	}
}

func TestNestedRootsTryEach(t *testing.T) {
	tr := buildTree(t)
	// roots[0] nested inside roots[1]: a request that escapes the first may still be under the second.
	g := newGuard(t, testModes[0], filepath.Join(tr.root, "a"), tr.root)
	d, err := g.Resolve(tr.root + "/a/../deep")
	require.NoError(t, err)
	assert.Equal(t, tr.root, d.Root)
	d.Close()
}

func TestNewErrors(t *testing.T) {
	tr := buildTree(t)
	for _, tc := range []struct {
		name  string
		roots []string
		want  error
	}{
		{"no roots", nil, ErrNoRoots},
		{"empty", []string{""}, ErrBadRoot},
		{"slash", []string{"/"}, ErrBadRoot},
		{"missing", []string{filepath.Join(tr.tmp, "missing")}, ErrBadRoot},
		{"file", []string{filepath.Join(tr.root, "file.txt")}, ErrBadRoot},
		{"second bad", []string{tr.root, filepath.Join(tr.tmp, "missing")}, ErrBadRoot},
		{"nul", []string{"a\x00b"}, ErrBadRoot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(tc.roots...)
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, g)
		})
	}
}

func TestRelativeRootIsMadeAbsolute(t *testing.T) {
	tr := buildTree(t)
	t.Chdir(tr.tmp)
	g := newGuard(t, testModes[0], "root")
	assert.Equal(t, []string{tr.root}, g.Roots())
}

func TestClose(t *testing.T) {
	tr := buildTree(t)
	g, err := New(tr.root)
	require.NoError(t, err)
	d, err := g.Resolve("a")
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, g.Close())
	// A handle outlives the guard.
	require.NoError(t, d.Verify())
	require.NoError(t, d.Close())
	_, err = g.Resolve("a")
	assertReason(t, err, ReasonInvalid)
	assert.ErrorIs(t, err, ErrClosed)
	var nilDir *Dir
	assert.NoError(t, nilDir.Close())
}

func TestVerify(t *testing.T) {
	tr := buildTree(t)
	g := newGuard(t, testModes[0], tr.root)
	a, err := g.Resolve("a")
	require.NoError(t, err)
	defer a.Close()
	b, err := g.Resolve("a/b")
	require.NoError(t, err)
	defer b.Close()

	require.NoError(t, Verify(a.File, a.Dev, a.Ino))
	err = Verify(b.File, a.Dev, a.Ino)
	require.ErrorIs(t, err, ErrMismatch)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorIs(t, Verify(nil, 1, 2), ErrMismatch)

	f, err := os.Open(filepath.Join(tr.root, "file.txt"))
	require.NoError(t, err)
	defer f.Close()
	dev, ino := statID(t, f.Name())
	assertReason(t, Verify(f, dev, ino), ReasonNotDirectory)

	// Renaming the directory keeps its identity: the handle follows the directory, not the name.
	require.NoError(t, os.Rename(filepath.Join(tr.root, "a"), filepath.Join(tr.root, "moved")))
	require.NoError(t, a.Verify())
}

func TestErrorText(t *testing.T) {
	e := &Error{Reason: ReasonSymlinkEscape, Request: strings.Repeat("x", 5000), Detail: `"l" -> "/etc"`, Err: syscall.EXDEV}
	msg := e.Error()
	assert.Contains(t, msg, "symlink_escape")
	assert.Contains(t, msg, "symbolic link leads out")
	assert.Contains(t, msg, `"l" -> "/etc"`)
	assert.Contains(t, msg, "(5000 bytes)")
	assert.Less(t, len(msg), 600)
	assert.True(t, errors.Is(e, ErrRefused))
	assert.True(t, errors.Is(e, syscall.EXDEV))
	for _, r := range Reasons {
		assert.True(t, r.Valid())
		assert.NotEqual(t, string(r), r.Words())
	}
	assert.False(t, Reason("nope").Valid())
}

func TestLexicalHelpers(t *testing.T) {
	for _, tc := range []struct {
		rel     string
		escapes bool
	}{
		{".", false}, {"a/..", false}, {"a/../..", true}, {"../a", true}, {"a/b/../../c", false},
		{"a/./../../", true}, {"..a/b", false}, {"", false},
	} {
		assert.Equal(t, tc.escapes, lexicallyEscapes(tc.rel), tc.rel)
	}
	for _, tc := range []struct {
		p, base, rel string
		ok           bool
	}{
		{"/r/a", "/r", "a", true},
		{"/r", "/r", ".", true},
		{"/r/", "/r", ".", true},
		{"//r/./a/../b", "/r", "a/../b", true},
		{"/rx/a", "/r", "", false},
		{"/", "/r", "", false},
		{"/r/../r/a", "/r", "../r/a", true},
	} {
		rel, ok := underRoot(tc.p, tc.base)
		assert.Equal(t, tc.ok, ok, tc.p)
		assert.Equal(t, tc.rel, rel, tc.p)
	}
}

func assertReason(t testing.TB, err error, want Reason) {
	t.Helper()
	var pe *Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, want, pe.Reason, "%v", err)
	assert.ErrorIs(t, err, ErrRefused)
}
