// SPDX-License-Identifier: MIT

package kernel

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// onThrowawayThread runs fn on a locked OS thread other than the main one, which dies
// afterwards (the goroutine exits still locked), as the thread launcher does.
func onThrowawayThread(t testing.TB, fn func()) {
	t.Helper()
	done := make(chan struct{})
	var run func()
	run = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Holding the main thread forces the retry onto another one.
			defer runtime.UnlockOSThread()
			inner := make(chan struct{})
			go func() { run(); close(inner) }()
			<-inner
			return
		}
		fn()
	}
	go func() { defer close(done); run() }()
	<-done
}

// The ruleset built with go-landlock's raw calls restricts the calling thread only: the
// thread cannot read outside its rules while the rest of the process still can.
func TestRestrictLandlockIsThreadLocal(t *testing.T) {
	abi := LandlockABI()
	testutil.SkipUnlessSupported(t, abi > 0, "needs Landlock")
	allowed, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("s"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(allowed, "ok"), []byte("k"), 0o600))

	l := &Landlock{ABI: abi, ReadOnly: []string{allowed}}
	var restrictErr, readOK, readSecret error
	onThrowawayThread(t, func() {
		fd, err := LandlockRuleset(l)
		if err != nil {
			restrictErr = err
			return
		}
		defer unix.Close(fd)
		if restrictErr = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); restrictErr != nil {
			return
		}
		if restrictErr = RestrictLandlock(l, fd); restrictErr != nil {
			return
		}
		var b [1]byte
		readOK = readRaw(filepath.Join(allowed, "ok"), b[:])
		readSecret = readRaw(secret, b[:])
	})
	require.NoError(t, restrictErr)
	assert.NoError(t, readOK)
	assert.ErrorIs(t, readSecret, unix.EACCES)
	// This goroutine's thread (and every other) is untouched.
	_, err := os.ReadFile(secret)
	assert.NoError(t, err)
}

// readRaw opens and reads with raw syscalls on the calling thread (os.ReadFile could hop
// threads only if the goroutine were not locked; raw calls make the thread explicit).
func readRaw(path string, b []byte) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Read(fd, b)
	return err
}

func TestHandledRightsGrowWithABI(t *testing.T) {
	for _, tc := range []struct {
		abi      int
		fs, net  uint64
		hasRefer bool
	}{
		{1, fsV1, 0, false},
		{4, fsV1 | 1<<13 | 1<<14, 3, true},
		{10, fsV1 | 1<<13 | 1<<14 | 1<<15 | 1<<16, 15, true},
	} {
		assert.Equal(t, tc.fs, handledFS(tc.abi), "abi %d", tc.abi)
		assert.Equal(t, tc.net, handledNet(tc.abi), "abi %d", tc.abi)
	}
}
