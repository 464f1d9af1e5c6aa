// SPDX-License-Identifier: MIT

//go:build unix

package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// world is a root with a real subdirectory and, beside it, an "outside" directory standing
// for /etc, reached from inside the root by symlinks.
type world struct{ root, outside string }

func newWorld(t *testing.T) world {
	t.Helper()
	base := t.TempDir()
	w := world{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	require.NoError(t, os.MkdirAll(filepath.Join(w.root, "real", "sub"), 0o755))
	require.NoError(t, os.MkdirAll(w.outside, 0o755))
	require.NoError(t, os.Symlink(w.outside, filepath.Join(w.root, "abs")))
	require.NoError(t, os.Symlink("real", filepath.Join(w.root, "inside"))) // stays inside: refused all the same
	require.NoError(t, os.Symlink("../outside", filepath.Join(w.root, "real", "up")))
	require.NoError(t, os.WriteFile(filepath.Join(w.root, "file"), nil, 0o644))
	return w
}

func (w world) outsideEmpty(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(w.outside)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing was made outside the root")
}

// bothWays runs f with openat2 and with the element-by-element walk (Linux), or once.
func bothWays(t *testing.T, f func(t *testing.T)) {
	t.Run("default", f)
	if forceWalk != nil {
		t.Run("walk", func(t *testing.T) {
			forceWalk(t)
			f(t)
		})
	}
}

func TestMkdirAllRefusesSymlinks(t *testing.T) {
	bothWays(t, func(t *testing.T) {
		w := newWorld(t)
		for _, rel := range []string{"abs/x", "abs/x/y", "inside/x", "real/up/x", "abs", "file/x", "../outside/x", "/tmp/x", "real/../abs/x", "./real", "real//x"} {
			err := MkdirAll(w.root, rel, 0o700)
			require.Error(t, err, rel)
			assert.ErrorIs(t, err, ErrUnsafePath, rel)
		}
		w.outsideEmpty(t)
		require.NoError(t, MkdirAll(w.root, "real/sub/a/b", 0o700))
		st, err := os.Lstat(filepath.Join(w.root, "real", "sub", "a", "b"))
		require.NoError(t, err)
		assert.True(t, st.IsDir())
		require.NoError(t, MkdirAll(w.root, "real/sub/a/b", 0o700), "existing dirs are fine")
		require.NoError(t, MkdirAll(w.root, "", 0o700), "the root itself")
	})
}

// TestOSMkdirAllFollows is the positive control: the standard call, given the same path,
// creates the directory where the link points. That is the bug safefs exists for.
func TestOSMkdirAllFollows(t *testing.T) {
	w := newWorld(t)
	require.NoError(t, os.MkdirAll(filepath.Join(w.root, "abs", "x"), 0o700))
	_, err := os.Stat(filepath.Join(w.outside, "x"))
	assert.NoError(t, err, "os.MkdirAll followed the symlink")
}

func TestOpenDirMkdirCreateExcl(t *testing.T) {
	bothWays(t, func(t *testing.T) {
		w := newWorld(t)
		d, err := OpenDir(w.root, "real/sub")
		require.NoError(t, err)
		fi, err := d.Stat()
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
		d.Close()
		for _, rel := range []string{"abs", "inside", "real/up", "file"} {
			_, err := OpenDir(w.root, rel)
			assert.ErrorIs(t, err, ErrUnsafePath, rel)
		}

		assert.ErrorIs(t, Mkdir(w.root, "abs/hooks", 0o755), ErrUnsafePath)
		assert.ErrorIs(t, Mkdir(w.root, "real/up/hooks", 0o755), ErrUnsafePath)
		require.NoError(t, Mkdir(w.root, "real/hooks", 0o755))
		assert.ErrorIs(t, Mkdir(w.root, "real/hooks", 0o755), os.ErrExist)
		assert.ErrorIs(t, Mkdir(w.root, "", 0o755), ErrUnsafePath)

		_, err = CreateExcl(w.root, "abs/config", 0o644)
		assert.ErrorIs(t, err, ErrUnsafePath)
		// A symlink as the last element is not followed either: O_EXCL sees it exists.
		_, err = CreateExcl(w.root, "real/up", 0o644)
		assert.ErrorIs(t, err, os.ErrExist)
		f, err := CreateExcl(w.root, "real/config", 0o644)
		require.NoError(t, err)
		f.Close()
		w.outsideEmpty(t)
	})
}

func TestUnsafePathErrorSays(t *testing.T) {
	w := newWorld(t)
	err := MkdirAll(w.root, "abs/x", 0o700)
	var ue *UnsafePathError
	require.True(t, errors.As(err, &ue))
	assert.Contains(t, err.Error(), "abs is a symlink")
	assert.Contains(t, err.Error(), w.root)
}

// FuzzSplit: whatever split accepts is relative, has no "..", "." or empty element, and
// joins back to itself.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", ".", "a", "a/b", "../a", "a/../b", "/a", "a//b", "a/./b", "a/", "..", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		elems, err := split("/r", rel)
		if err != nil {
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("%q: %v is not ErrUnsafePath", rel, err)
			}
			return
		}
		if len(elems) == 0 {
			if rel != "" && rel != "." {
				t.Fatalf("%q: no elements", rel)
			}
			return
		}
		if filepath.Join(elems...) != rel || filepath.IsAbs(rel) {
			t.Fatalf("%q: elements %q", rel, elems)
		}
		for _, e := range elems {
			if e == "" || e == "." || e == ".." {
				t.Fatalf("%q: element %q", rel, e)
			}
		}
	})
}

func TestTempParent(t *testing.T) {
	base := t.TempDir()
	proj := filepath.Join(base, "proj")
	require.NoError(t, os.MkdirAll(filepath.Join(proj, ".tmp"), 0o755))
	require.NoError(t, os.Symlink(proj, filepath.Join(base, "alias")))

	t.Setenv("TMPDIR", base)
	got, err := TempParent([]string{proj})
	require.NoError(t, err)
	assert.Equal(t, base, got, "a TMPDIR beside the project is used")

	for _, tmp := range []string{filepath.Join(proj, ".tmp"), filepath.Join(base, "alias", ".tmp"), filepath.Join(proj, ".tmp", "deeper")} {
		t.Setenv("TMPDIR", tmp)
		got, err := TempParent([]string{proj})
		require.NoError(t, err)
		assert.Equal(t, "/tmp", got, tmp)
	}
	// A root equal to the temp dir is fine: the command cannot replace its own root.
	t.Setenv("TMPDIR", proj)
	got, err = TempParent([]string{proj})
	require.NoError(t, err)
	assert.Equal(t, proj, got)

	t.Setenv("TMPDIR", filepath.Join(proj, ".tmp"))
	_, err = TempParent([]string{"/"})
	assert.ErrorIs(t, err, ErrUnsafePath, "everything writable: nowhere is safe")
}

func TestLstatRenameNoReplaceRefuseSymlinks(t *testing.T) {
	bothWays(t, func(t *testing.T) {
		w := newWorld(t)
		require.NoError(t, os.Mkdir(filepath.Join(w.outside, ".git"), 0o755))
		require.NoError(t, os.Mkdir(filepath.Join(w.root, "real", "sub", ".git"), 0o755))
		// Through a symlink on the way: refused, nothing outside is renamed.
		for _, rel := range []string{"abs/.git", "inside/sub/.git", "real/up/.git"} {
			_, err := Lstat(w.root, rel)
			assert.ErrorIs(t, err, ErrUnsafePath, rel)
			assert.ErrorIs(t, RenameNoReplace(w.root, rel, ".git.q"), ErrUnsafePath, rel)
		}
		assert.DirExists(t, filepath.Join(w.outside, ".git"))
		// The last element is not followed: a symlink there is seen and renamed as one.
		st, err := Lstat(w.root, "abs")
		require.NoError(t, err)
		assert.Equal(t, uint32(0o120000), st.Mode&0o170000)
		// A plain rename in one directory, never over an existing name.
		require.NoError(t, RenameNoReplace(w.root, "real/sub/.git", ".git.q"))
		assert.DirExists(t, filepath.Join(w.root, "real", "sub", ".git.q"))
		require.NoError(t, os.Mkdir(filepath.Join(w.root, "real", "sub", ".git"), 0o755))
		assert.ErrorIs(t, RenameNoReplace(w.root, "real/sub/.git", ".git.q"), os.ErrExist)
		assert.ErrorIs(t, RenameNoReplace(w.root, "real/sub/.git", "../x"), ErrUnsafePath)
	})
}
