// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestNetRootOnlyProcNamesTheSecrets: this kernel's network secrets are found where it has
// them (the TCP Fast Open key; the stable_secret of lo and of the "all" and "default"
// entries wherever IPv6 is built in), relative to /proc, and nothing other readers may read.
func TestNetRootOnlyProcNamesTheSecrets(t *testing.T) {
	names, err := NetRootOnlyProc()
	require.NoError(t, err)
	for _, n := range []string{"sys/net/ipv4/tcp_fastopen_key", "sys/net/ipv6/conf/lo/stable_secret", "sys/net/ipv6/conf/default/stable_secret"} {
		if _, err := os.Lstat("/proc/" + n); err == nil {
			assert.Contains(t, names, n)
		}
	}
	for _, n := range names {
		fi, err := os.Lstat("/proc/" + n)
		require.NoError(t, err)
		assert.Zero(t, fi.Mode().Perm()&0o004, "%s is readable by others: no cover needed", n)
	}
}

// TestNetRootOnlyProcBounded: a namespace with more interfaces than maxNetCovers is
// refused with ErrTooManyCovers, not given a mount per interface on every launch.
func TestNetRootOnlyProcBounded(t *testing.T) {
	proc := t.TempDir()
	conf := filepath.Join(proc, "sys/net/ipv6/conf")
	for i := range maxNetCovers + 1 {
		d := filepath.Join(conf, fmt.Sprint("veth", i))
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	_, err := scanNetRootOnlyProcIn(proc)
	require.ErrorIs(t, err, ErrTooManyCovers)

	// At the bound: every secret there is named, a world-readable one is not.
	require.NoError(t, os.RemoveAll(filepath.Join(conf, "veth0")))
	require.NoError(t, os.WriteFile(filepath.Join(conf, "veth1", "stable_secret"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(conf, "veth2", "stable_secret"), nil, 0o644))
	names, err := scanNetRootOnlyProcIn(proc)
	require.NoError(t, err)
	assert.Equal(t, []string{"sys/net/ipv6/conf/veth1/stable_secret"}, names)
}

// TestRootOnlyProcRetriesAfterAFailure: the list is found once per process, but a failure
// to find it (here: out of file descriptors, as a busy host can be for a moment) must not
// be kept: every later root run would be refused until fledge restarts.
func TestRootOnlyProcRetriesAfterAFailure(t *testing.T) {
	rootOnlyProc.mu.Lock()
	rootOnlyProc.names = nil
	rootOnlyProc.mu.Unlock()

	var lim unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	// The lowest free descriptor is at or above 3: a limit of 3 leaves none to open /proc.
	low := lim
	low.Cur = 3
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	_, err := RootOnlyProc()
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))
	require.ErrorIs(t, err, unix.EMFILE, "control: /proc cannot be listed without a descriptor")

	names, err := RootOnlyProc()
	require.NoError(t, err, "the failure was kept")
	assert.Contains(t, names, "keys")
}

// TestRootOnlyProcUnderSubsetPid: fledge run as a service with systemd's ProcSubset=pid
// sees a /proc of processes only (subset=pid), while the procfs each view gets (the pid
// namespace's, or a fresh one) shows the kernel's files: a list found in fledge's own
// /proc would be empty and cover nothing. The list must be the kernel's whatever /proc
// fledge sees. The control: the subset procfs lacks slabinfo.
func TestRootOnlyProcUnderSubsetPid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not supported, skipping: needs root")
	}
	full, err := scanRootOnlyProc("/proc")
	require.NoError(t, err)
	require.Contains(t, full, "slabinfo", "control: this kernel has root-only files")
	// Over /proc itself, as the service sees it (the full one is found through
	// /proc/self, which subset=pid keeps).
	const dir = "/proc"
	var names, netNames []string
	var lacks bool
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its mount namespace
		if serr = unix.Unshare(unix.CLONE_NEWNS); serr != nil {
			return
		}
		if serr = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); serr != nil {
			return
		}
		if serr = unix.Mount("proc", dir, "proc", unix.MS_RDONLY, "subset=pid"); serr != nil {
			return
		}
		_, err := os.Lstat(dir + "/slabinfo")
		lacks = errors.Is(err, os.ErrNotExist)
		names, serr = scanRootOnlyProc(dir)
		if serr == nil {
			netNames, serr = scanNetRootOnlyProc(dir)
		}
	}()
	<-done
	if errors.Is(serr, unix.EINVAL) && names == nil && !lacks {
		t.Skipf("not supported, skipping: no subset=pid here (%v)", serr)
	}
	require.True(t, lacks, "control: a subset=pid procfs has no slabinfo (%v)", serr)
	require.NoError(t, serr)
	assert.ElementsMatch(t, full, names)
	fullNet, err := scanNetRootOnlyProc("/proc")
	require.NoError(t, err)
	assert.ElementsMatch(t, fullNet, netNames, "the network secrets too")
}
