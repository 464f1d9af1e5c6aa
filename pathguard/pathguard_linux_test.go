// SPDX-License-Identifier: MIT

package pathguard

import (
	"errors"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Both Linux resolvers run every table: openat2, and the os.Root fallback used where openat2
// is missing or forbidden by seccomp.
var testModes = []string{"openat2", "osroot"}

func openat2Supported() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	if err == nil {
		unix.Close(fd)
	}
	return !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM)
}

func setMode(t testing.TB, g *Guard, mode string) {
	t.Helper()
	switch mode {
	case "openat2":
		testutil.SkipUnlessSupported(t, openat2Supported(), "openat2 is missing or forbidden by seccomp")
		g.fallback.Store(false)
	case "osroot":
		g.fallback.Store(true)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

// checkMode makes sure a test named openat2 did not silently run on the fallback.
func checkMode(t testing.TB, g *Guard, mode string) {
	t.Helper()
	require.Equal(t, mode == "osroot", g.fallback.Load(), "resolver in use")
}

// A root inside procfs makes the kernel itself meet a magic link beneath the root:
// RESOLVE_NO_MAGICLINKS answers ELOOP, which must read as magic_link.
func TestMagicLinkBeneathProcRoot(t *testing.T) {
	for _, mode := range testModes {
		t.Run(mode, func(t *testing.T) {
			g := newGuard(t, mode, "/proc/self")
			for _, req := range []string{"cwd", "root", "cwd/x", "/proc/self/cwd", "/proc/self/root/etc"} {
				_, err := g.Resolve(req)
				assertReason(t, err, ReasonMagicLink)
			}
			// Ordinary directories of the same procfs root are fine.
			d, err := g.Resolve("fd")
			require.NoError(t, err)
			d.Close()
			checkMode(t, g, mode)
		})
	}
}

// O_PATH handles are what the child gets: they must be close-on-exec until ExtraFiles dups
// them, and fchdir must accept them (checked in TestHandleTravelsToChild).
func TestHandleIsOPathCloexec(t *testing.T) {
	testutil.SkipUnlessSupported(t, openat2Supported(), "openat2 is missing or forbidden by seccomp")
	tr := buildTree(t)
	g := newGuard(t, "openat2", tr.root)
	d, err := g.Resolve("a")
	require.NoError(t, err)
	defer d.Close()
	fl, err := unix.FcntlInt(d.File.Fd(), unix.F_GETFL, 0)
	require.NoError(t, err)
	assert.NotZero(t, fl&unix.O_PATH, "O_PATH")
	fdfl, err := unix.FcntlInt(d.File.Fd(), unix.F_GETFD, 0)
	require.NoError(t, err)
	assert.NotZero(t, fdfl&unix.FD_CLOEXEC, "close-on-exec")
}

func TestDisplayPathFollowsTheKernel(t *testing.T) {
	for _, mode := range testModes {
		t.Run(mode, func(t *testing.T) {
			tr := buildTree(t)
			g := newGuard(t, mode, tr.root)
			// Lexically "link_sib/.." is "a", but the kernel goes through the link first.
			d, err := g.Resolve("a/link_sib/..")
			require.NoError(t, err)
			defer d.Close()
			assert.Equal(t, tr.root+"/deep", d.Path)
		})
	}
}

// availableModes is testModes minus openat2 where the kernel lacks it (the fuzz loop cannot
// skip per input).
func availableModes() []string {
	if openat2Supported() {
		return testModes
	}
	return []string{"osroot"}
}
