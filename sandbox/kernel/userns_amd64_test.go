// SPDX-License-Identifier: MIT

//go:build linux && amd64

package kernel

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestForkUserNS: the namespace is a new user namespace (not this process's), its parked
// child is killed and reaped before ForkUserNS returns (no child of this process is left),
// and its root is mapped as asked: an idmapped mount through it shows root's files as
// 65534.
func TestForkUserNS(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root")
	fd, err := ForkUserNS("0 65534 1\n", "0 65534 1\n")
	require.NoError(t, err)
	defer unix.Close(fd)
	var ns, self unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &ns))
	require.NoError(t, unix.Stat("/proc/self/ns/user", &self))
	assert.NotEqual(t, self.Ino, ns.Ino, "a new user namespace")
	var ws unix.WaitStatus
	_, err = unix.Wait4(-1, &ws, unix.WNOHANG, nil)
	assert.ErrorIs(t, err, unix.ECHILD, "the parked child was reaped")

	dir := t.TempDir() // root's, 0700
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(fd)}
	require.NoError(t, unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr))
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(tree, &st))
	assert.Equal(t, uint32(65534), st.Uid, "root shows as 65534 through the mapping")
}
