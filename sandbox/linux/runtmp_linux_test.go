// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// leaveInTmp is what a command leaves in and on its TMPDIR for the next run to find:
// files, a directory tree, a FIFO, a symlink out, a hard link, open permissions (set-id
// bits are refused by seccomp anyway), user extended attributes, a default ACL (written as
// its xattr) and an ACL entry (when setfacl is installed), and a process outside its
// process group that keeps writing there.
const leaveInTmp = `set -u
echo "$TMPDIR" > "$PWD/tmp-of-first"
echo LEFT > "$TMPDIR/file"
mkdir -p "$TMPDIR/d/e" && echo LEFT > "$TMPDIR/d/e/f"
mkfifo "$TMPDIR/fifo"
ln -s /etc/passwd "$TMPDIR/link"
ln "$TMPDIR/file" "$TMPDIR/hard"
/usr/bin/python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.left", b"LEFT"); print("xattr set")' "$TMPDIR"
command -v setfacl >/dev/null && setfacl -m u:65534:rwx "$TMPDIR" && echo "acl set"
/usr/bin/python3 -c 'import os,struct,sys
# A default ACL (every file made in the directory inherits it): user::rwx, user:65534:rwx,
# group::rwx, mask::rwx, other::rwx.
e = [(1,7,0xffffffff),(2,7,65534),(4,7,0xffffffff),(0x10,7,0xffffffff),(0x20,7,0xffffffff)]
os.setxattr(sys.argv[1], "system.posix_acl_default", struct.pack("<I",2) + b"".join(struct.pack("<HHI",*x) for x in e))
print("default acl set")' "$TMPDIR"
chmod 777 "$TMPDIR" && echo "mode set"
setsid sh -c 'while :; do echo LATE > "$0/late" 2>/dev/null; sleep 0.05; done' "$TMPDIR" </dev/null >/dev/null 2>&1 &
sleep 0.1
echo first done`

// TestRunTmpReuseLeavesNothing attacks the TMPDIR a finished run's directory becomes for a
// later run: everything in leaveInTmp must be gone, the mode 0700 again, no extended
// attribute left, and the escaped writer dead (its file never appears).
func TestRunTmpReuseLeavesNothing(t *testing.T) {
	sb := newSandbox(t, Options{})
	testutil.SkipUnlessSupported(t, sb.cg.writable(), "needs a writable cgroup (tree kill)")
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec(leaveInTmp))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.Contains(t, out, "xattr set")
	require.Contains(t, out, "default acl set")
	require.Contains(t, out, "mode set")
	require.Contains(t, out, "first done")
	b, err := os.ReadFile(filepath.Join(e.project, "tmp-of-first"))
	require.NoError(t, err)
	first := strings.TrimSpace(string(b))
	// The cleanup that empties it runs after the reply: wait for it.
	sb.cleanups.Wait()
	require.DirExists(t, first, "kept for the next run")

	res, out, errOut = run(t, sb, e.spec(`echo "tmp=$TMPDIR"; ls -A "$TMPDIR"; stat -c 'mode=%a' "$TMPDIR"
/usr/bin/python3 -c 'import os,sys; print("xattrs=%s" % os.listxattr(sys.argv[1]))' "$TMPDIR"
command -v getfacl >/dev/null && getfacl -c "$TMPDIR" 2>/dev/null | grep -c '^user:[0-9a-z]' | sed 's/^/acl-users=/'
sleep 0.3; ls -A "$TMPDIR"; echo end`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Contains(t, out, "tmp="+first+"\n", "the second run got the first run's emptied TMPDIR")
	assert.NotContains(t, out, "file")
	assert.NotContains(t, out, "late")
	assert.NotContains(t, out, "fifo")
	assert.Contains(t, out, "mode=700\n")
	assert.Contains(t, out, "xattrs=[]\n")
	assert.NotContains(t, out, "acl-users=1")
	assert.True(t, strings.HasSuffix(out, "end\n"), out)
	// And on disk, from the host.
	sb.cleanups.Wait()
	ents, err := os.ReadDir(first)
	require.NoError(t, err)
	assert.Empty(t, ents)
}

// TestRunTmpConcurrentRunsOwnDirs: runs alive at the same time never share a TMPDIR, with
// finished runs' directories being reused meanwhile.
func TestRunTmpConcurrentRunsOwnDirs(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	for round := 0; round < 3; round++ {
		var outs []string
		done := make(chan string, 4)
		for i := 0; i < 4; i++ {
			go func() {
				_, out, _ := run(t, sb, e.spec(`echo "$TMPDIR"; sleep 0.2`))
				done <- strings.TrimSpace(out)
			}()
		}
		for i := 0; i < 4; i++ {
			select {
			case o := <-done:
				outs = append(outs, o)
			case <-time.After(30 * time.Second):
				t.Fatal("runs did not finish")
			}
		}
		seen := map[string]bool{}
		for _, o := range outs {
			require.NotEmpty(t, o)
			assert.False(t, seen[o], "two live runs shared TMPDIR %s", o)
			seen[o] = true
		}
		sb.cleanups.Wait()
	}
}

// TestRunTmpNotReusedWithoutTreeKill: without a cgroup nothing proves a run's processes
// are gone, so its TMPDIR is removed, never handed on.
func TestRunTmpNotReusedWithoutTreeKill(t *testing.T) {
	sb := newSandbox(t, Options{DisableCgroups: true})
	e := newEnv(t)
	var dirs []string
	for i := 0; i < 3; i++ {
		res, out, errOut := run(t, sb, e.spec(`echo "$TMPDIR"`))
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
		dirs = append(dirs, strings.TrimSpace(out))
		sb.cleanups.Wait()
		assert.NoDirExists(t, dirs[i])
	}
	assert.NotEqual(t, dirs[0], dirs[1])
}

// TestRunTmpChangedIdentityNotReused: a pooled directory replaced on disk (here by fledge's
// own user, standing in for anything that swapped it) is not handed out.
func TestRunTmpChangedIdentityNotReused(t *testing.T) {
	var r runTmps
	parent := t.TempDir()
	d, err := r.get(parent, "p")
	require.NoError(t, err)
	require.NoError(t, r.put(parent, "p", d))
	require.NoError(t, os.Remove(d.path))
	require.NoError(t, os.Symlink(t.TempDir(), d.path))
	d2, err := r.get(parent, "p")
	require.NoError(t, err)
	assert.NotEqual(t, d.path, d2.path)
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(d2.path, &st))
	assert.EqualValues(t, unix.S_IFDIR, st.Mode&unix.S_IFMT)
	require.NoError(t, r.put(parent, "p", d2))
	require.NoError(t, r.closeAll())
	assert.NoFileExists(t, d2.path)
}

// TestRunTmpChangedGroupNotReused: a pooled directory whose group changed (a run may chgrp
// the directory it owns to any group it is in; the host stands in for it here) is removed,
// not handed out.
func TestRunTmpChangedGroupNotReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a directory's group to one fledge's user is not in needs root")
	}
	var r runTmps
	parent := t.TempDir()
	d, err := r.get(parent, "p")
	require.NoError(t, err)
	require.NoError(t, os.Chown(d.path, -1, 65534))
	require.NoError(t, r.put(parent, "p", d))
	assert.NoDirExists(t, d.path, "removed at put")
	d2, err := r.get(parent, "p")
	require.NoError(t, err)
	assert.NotEqual(t, d.path, d2.path)
	require.NoError(t, r.put(parent, "p", d2))
	// Changed while pooled: refused when handed out.
	require.NoError(t, os.Chown(d2.path, -1, 65534))
	d3, err := r.get(parent, "p")
	require.NoError(t, err)
	assert.NotEqual(t, d2.path, d3.path)
	assert.NoDirExists(t, d2.path)
	require.NoError(t, r.put(parent, "p", d3))
	require.NoError(t, r.closeAll())
}

// TestRunTmpReusedAfterManyEntries: a directory that grew (ext4 then hash-indexes it for
// good, a layout flag no run chose) is still reused once emptied.
func TestRunTmpReusedAfterManyEntries(t *testing.T) {
	var r runTmps
	parent := t.TempDir()
	d, err := r.get(parent, "p")
	require.NoError(t, err)
	for i := 0; i < 2000; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(d.path, strings.Repeat("n", 40)+strconv.Itoa(i)), nil, 0o600))
	}
	require.NoError(t, r.put(parent, "p", d))
	d2, err := r.get(parent, "p")
	require.NoError(t, err)
	assert.Equal(t, d.path, d2.path)
	require.NoError(t, r.put(parent, "p", d2))
	require.NoError(t, r.closeAll())
}

// BenchmarkRunTmpCycle: one run's worth of pool work on a reused TMPDIR (hand out, empty,
// check, keep).
func BenchmarkRunTmpCycle(b *testing.B) {
	var r runTmps
	parent := b.TempDir()
	for b.Loop() {
		d, err := r.get(parent, "p")
		if err != nil {
			b.Fatal(err)
		}
		if err := r.put(parent, "p", d); err != nil {
			b.Fatal(err)
		}
	}
	if err := r.closeAll(); err != nil {
		b.Fatal(err)
	}
}
