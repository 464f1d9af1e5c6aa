// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// setInodeAttrs is what a run sets on its TMPDIR's inode, one attribute at a time (a
// filesystem refuses some): the chattr flags noatime, sync, dirsync, nodump, topdir,
// project inherit and casefold, a project id, an inherited extent size hint, and a
// (v1) fscrypt policy naming a key nobody has. None of it goes away when the directory is
// emptied. Each success is printed.
const setInodeAttrs = `set -u
echo "$TMPDIR" > "$PWD/tmp-of-first"
for f in A S D d T P F; do chattr +$f "$TMPDIR" 2>/dev/null && echo "set +$f"; done
chattr -p 123 "$TMPDIR" 2>/dev/null && echo "set projid"
/usr/bin/python3 - "$TMPDIR" <<'EOF'
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    b = bytearray(28)
    fcntl.ioctl(fd, 0x801c581f, b)  # FS_IOC_FSGETXATTR
    xflags, _, nextents, projid, cow = struct.unpack("IIIII", b[:20])
    # FS_XFLAG_EXTSZINHERIT and a 1 MiB hint: every new file inherits it.
    fcntl.ioctl(fd, 0x401c5820, struct.pack("IIIII8x", xflags | 0x1000, 1 << 20, nextents, projid, cow))
    print("set extsize")
except OSError:
    pass
try:
    # FS_IOC_SET_ENCRYPTION_POLICY, v1 (only ownership needed): AES-256-XTS/CTS, a key
    # descriptor no keyring holds, so nothing can be created in the directory.
    fcntl.ioctl(fd, 0x800c6613, struct.pack("BBBB8s", 0, 1, 4, 0, b"fledgeXX"))
    print("set encryption")
except OSError:
    pass
EOF
echo first done`

// showInodeAttrs prints the inode attributes of directory $1 that setInodeAttrs changes:
// lsattr's project id and flags, the fsxattr fields (without FS_XFLAG_HASATTR, which XFS
// reports for an attribute fork it may keep after its last attribute is gone).
const showInodeAttrs = `lsattr -dp "$1" 2>/dev/null | awk '{print "lsattr=" $1 " " $2}'
/usr/bin/python3 - "$1" <<'EOF'
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    b = bytearray(28)
    fcntl.ioctl(fd, 0x801c581f, b)
    xflags, extsize, _, projid, cow = struct.unpack("IIIII", b[:20])
    print("fsxattr=xflags:%x extsize:%d projid:%d cowextsize:%d" % (xflags & ~0x80000000, extsize, projid, cow))
except OSError as e:
    print("fsxattr=%s" % e.strerror)
EOF`

// TestRunTmpReuseKeepsNoInodeFlags attacks the reuse of an emptied TMPDIR with what stays
// on its inode: a run sets every flag, project id, extent size hint and encryption policy
// its filesystem lets the directory's owner set, and the next run of the same plugin must
// get a TMPDIR whose attributes are those of a directory just made in the same parent (and
// in which it can create a file). On the host's own temp dir, a tmpfs (noatime and nodump
// only), ext4 with encryption and XFS (project ids and extent size hints), the last two
// loop images, all mounted in the harness's private mount namespace.
func TestRunTmpReuseKeepsNoInodeFlags(t *testing.T) {
	testutil.RequireContained(t)
	t.Run("host-tmp", func(t *testing.T) {
		checkTmpInodeAttrsReset(t, os.TempDir(), nil)
	})
	t.Run("tmpfs", func(t *testing.T) {
		mnt := filepath.Join(t.TempDir(), "mnt")
		require.NoError(t, os.Mkdir(mnt, 0o755))
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "fledge-test", mnt).CombinedOutput(); err != nil {
			testutil.SkipUnlessSupported(t, false, "mount a tmpfs: "+err.Error()+": "+string(out))
		}
		t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
		checkTmpInodeAttrsReset(t, mnt, []string{"set +A", "set +d"})
	})
	t.Run("ext4-encrypt", func(t *testing.T) {
		opts := "encrypt"
		if _, err := os.Stat("/sys/fs/ext4/features/casefold"); err == nil {
			opts += ",casefold"
		}
		mnt := loopFS(t, 32<<20, "mkfs.ext4", "-q", "-F", "-O", opts)
		checkTmpInodeAttrsReset(t, mnt, []string{"set +A", "set +S", "set +D", "set +d", "set encryption"})
	})
	t.Run("xfs", func(t *testing.T) {
		mnt := loopFS(t, 300<<20, "mkfs.xfs", "-q", "-f")
		checkTmpInodeAttrsReset(t, mnt, []string{"set +P", "set projid", "set extsize"})
	})
}

// checkTmpInodeAttrsReset runs setInodeAttrs with its TMPDIR in parent, then a second
// run of the same plugin, and compares the second run's TMPDIR with a fresh directory.
func checkTmpInodeAttrsReset(t *testing.T, parent string, mustSet []string) {
	t.Setenv("TMPDIR", parent)
	sb := newSandbox(t, Options{})
	testutil.SkipUnlessSupported(t, sb.cg.writable(), "needs a writable cgroup (tree kill), or TMPDIRs are never reused")
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec(setInodeAttrs))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.Contains(t, out, "first done")
	for _, s := range mustSet {
		require.Contains(t, out, s+"\n", "the run could not set it: the test would prove nothing")
	}
	if !strings.Contains(out, "set ") {
		t.Skipf("the filesystem of %s lets a run set no attribute on its TMPDIR", parent)
	}
	t.Logf("first run on %s:\n%s", parent, out)
	b, err := os.ReadFile(filepath.Join(e.project, "tmp-of-first"))
	require.NoError(t, err)
	first := strings.TrimSpace(string(b))
	sb.cleanups.Wait()

	res, out, errOut = run(t, sb, e.spec(`echo "tmp=$TMPDIR"
sh -c "$1" sh "$TMPDIR"
echo new > "$TMPDIR/f" && echo created
echo end`, "sh", showInodeAttrs))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Contains(t, out, "created\n", "the next run cannot create a file in its TMPDIR: %s", errOut)

	fresh, err := os.MkdirTemp(parent, "fresh-")
	require.NoError(t, err)
	defer os.Remove(fresh)
	want, err := exec.Command("sh", "-c", showInodeAttrs, "sh", fresh).Output()
	require.NoError(t, err)
	require.Contains(t, string(want), "lsattr=")
	for _, l := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		assert.Contains(t, out, l+"\n", "the next run's TMPDIR (the first's was %s) differs from a fresh directory", first)
	}
	t.Logf("second run:\n%s", out)
}

// loopFS makes a filesystem image of size bytes with mkfs and mounts it in the test's
// mount namespace (the harness's own, private: it goes away with the test run).
func loopFS(t *testing.T, size int64, mkfs ...string) string {
	t.Helper()
	if _, err := exec.LookPath(mkfs[0]); err != nil {
		t.Skipf("%s is not installed", mkfs[0])
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, size))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, mkfs[0], append(mkfs[1:], img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mkfs[0], err, out)
	}
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		testutil.SkipUnlessSupported(t, false, "loop mount of a "+mkfs[0]+" image: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	return mnt
}
