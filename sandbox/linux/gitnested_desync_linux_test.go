// SPDX-License-Identifier: MIT

package linux

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// desyncIndex is a version-4 index that git reads as a file "a" and the gitlink "sub",
// while a reader that ends each v4 name at its first NUL (internal/gitindex) reads "a", a
// file "x" and an unknown extension covering the rest, git's gitlink entry included: git
// takes a v4 name's length from the entry's flags (read-cache.c create_from_disk copies
// len+1 bytes and steps over them, NULs included). The checksum is right.
func desyncIndex() []byte {
	fixed := func(mode uint32, namelen int) []byte {
		b := make([]byte, 40, 62)
		binary.BigEndian.PutUint32(b[24:], mode)
		for i := 0; i < 20; i++ {
			b = append(b, 0x11)
		}
		return binary.BigEndian.AppendUint16(b, uint16(namelen))
	}
	hidden := append(fixed(0o100644, 1), 0, 'x', 0)
	hidden = append(hidden, "ZZZZ"...)
	l := 2 + len(hidden) + 4 + 8
	out := append([]byte("DIRC"), 0, 0, 0, 4, 0, 0, 0, 2)
	out = append(append(out, fixed(0o100644, l)...), 0)
	nameAt := len(out)
	out = append(append(append(out, "a\x00"...), hidden...), make([]byte, l+1-2-len(hidden))...)
	out = append(append(out, fixed(0o160000, 3)...), byte(l))
	out = append(out, "sub\x00"...)
	zz := nameAt + 2 + len(hidden) - 4
	binary.BigEndian.PutUint32(out[zz+4:], uint32(len(out)-(zz+8)))
	sum := sha1.Sum(out)
	return append(out, sum[:]...)
}

// desyncAttack arms sub (a new repository with a planted fsmonitor) and records it as a
// gitlink through desyncIndex, written with printf (the index must stay writable).
func desyncAttack() string {
	var b strings.Builder
	for _, c := range desyncIndex() {
		fmt.Fprintf(&b, "\\%03o", c)
	}
	return armNested + "arm sub && printf '" + b.String() + "' > .git/index && echo armed\n"
}

// TestGitNestedDesyncAttackControl: unconfined, the user's git status after desyncAttack
// recurses into sub and runs its fsmonitor.
func TestGitNestedDesyncAttackControl(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	root := newRepo(t)
	marks := t.TempDir()
	c := exec.Command("/bin/sh", "-c", desyncAttack())
	c.Dir = root
	c.Env = append(os.Environ(), append(gitTestEnv, "MARKS="+marks)...)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, gitCmd(t, root, "ls-files", "--stage"), "160000 1111111111111111111111111111111111111111 0\tsub")
	userStatus(t, root)
	assert.FileExists(t, filepath.Join(marks, "fsmonitor-ran"), "unconfined, git status runs the nested repository's fsmonitor")
}

// TestViewGitNestedDesyncIndex: the same from a confined command. The gitlink git reads is
// invisible to fledge's index reader, so sub/.git is not quarantined when the run ends and
// the user's git status runs the planted fsmonitor.
func TestViewGitNestedDesyncIndex(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			root := newRepo(t)
			marks := t.TempDir()
			spec := gitAttackSpec(t, desyncAttack(), root, root)
			spec.Env = append(spec.Env, "MARKS="+marks)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Equal(t, "armed\n", out, errOut)
			userStatus(t, root)
			requireNoMarks(t, marks)
			assert.NoDirExists(t, filepath.Join(root, "sub", ".git"), "quarantined: %+v", res.Quarantined)
		})
	}
}
