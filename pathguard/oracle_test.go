// SPDX-License-Identifier: MIT

//go:build unix

package pathguard

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// devIno identifies a directory for the oracle.
type devIno struct{ dev, ino uint64 }

// oracleRoots records the roots' identities with a plain stat, independent of the guard.
func oracleRoots(t testing.TB, paths ...string) map[devIno]bool {
	t.Helper()
	m := map[devIno]bool{}
	for _, p := range paths {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(p, &st))
		m[devIno{uint64(st.Dev), uint64(st.Ino)}] = true
	}
	return m
}

// oracleBeneath is the independent check used by the fuzz and race tests: it walks parent
// links from the handle with openat(fd, "..") comparing (dev, ino) until it meets one of the
// roots (beneath) or the filesystem root, whose ".." is itself (escape). It shares no code
// with the guard.
func oracleBeneath(f *os.File, roots map[devIno]bool) (bool, error) {
	var cur int
	var derr error
	c, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	if err := c.Control(func(fd uintptr) { cur, derr = unix.Dup(int(fd)) }); err != nil {
		return false, err
	}
	if derr != nil {
		return false, derr
	}
	defer func() { unix.Close(cur) }()
	for range 4096 {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return false, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return false, fmt.Errorf("handle is not a directory (mode %o)", st.Mode)
		}
		id := devIno{uint64(st.Dev), uint64(st.Ino)}
		if roots[id] {
			return true, nil
		}
		parent, err := unix.Openat(cur, "..", oracleOpenFlags, 0)
		if err != nil {
			return false, err
		}
		var pst unix.Stat_t
		if err := unix.Fstat(parent, &pst); err != nil {
			unix.Close(parent)
			return false, err
		}
		unix.Close(cur)
		cur = parent
		if (devIno{uint64(pst.Dev), uint64(pst.Ino)}) == id {
			return false, nil // reached "/" without meeting a root
		}
	}
	return false, fmt.Errorf("no filesystem root after 4096 parents")
}

// The oracle has to be able to fail, or the fuzz and race tests prove nothing.
func TestOracle(t *testing.T) {
	tr := buildTree(t)
	roots := oracleRoots(t, tr.root)
	for _, tc := range []struct {
		path    string
		beneath bool
	}{
		{tr.root, true},
		{tr.root + "/a/b", true},
		{tr.outside, false},
		{tr.outside + "/x", false},
		{"/", false},
		{tr.tmp, false},
	} {
		f, err := os.Open(tc.path)
		require.NoError(t, err)
		got, err := oracleBeneath(f, roots)
		f.Close()
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.beneath, got, tc.path)
	}
}
