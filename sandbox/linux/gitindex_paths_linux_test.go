// SPDX-License-Identifier: MIT

package linux

import (
	"crypto/sha1"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// renameEntry records path (added as a file) under the same-length name in root's index,
// fixing the checksum: what a command that can write the index does to get past git
// add's verify_path.
func renameEntry(t *testing.T, root, path, name string) {
	t.Helper()
	require.Len(t, name, len(path))
	require.NoError(t, os.WriteFile(filepath.Join(root, path+".src"), []byte("x"), 0o644))
	gitCmd(t, root, "update-index", "--add", "--cacheinfo", "100644,"+strings.TrimSpace(gitCmd(t, root, "hash-object", "-w", path+".src"))+","+path)
	p := filepath.Join(root, ".git", "index")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	i := strings.Index(string(b), path+"\x00")
	require.GreaterOrEqual(t, i, 0)
	copy(b[i:], name)
	sum := sha1.Sum(b[:len(b)-20])
	copy(b[len(b)-20:], sum[:])
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

// TestViewGitIndexRefusedPaths: an index holding a path git's verify_path refuses refuses
// the launch (as an index fledge cannot read does), for each kind git refuses; one a run
// leaves is moved aside with a Quarantine record naming the path; the desynchronising v4
// index (a name git reads with NULs inside) has both its gitlink's .git and itself moved.
func TestViewGitIndexRefusedPaths(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	for _, name := range []string{".git/hooks/x", ".GIT/hooks/x", "a/.Git/config", "git~1/hooks/", "../escapes/x", ".git. /conf"} {
		root := newRepo(t)
		renameEntry(t, root, strings.Repeat("y", len(name)), name)
		_, err := sb.Start(t.Context(), gitAttackSpec(t, "true", root, root))
		require.Error(t, err, "%q at launch", name)
		assert.Contains(t, err.Error(), "git refuses to add", "%q", name)
	}

	root := newRepo(t)
	res, out, errOut := run(t, sb, gitAttackSpec(t, `printf x > f && b=$(git hash-object -w f) &&
git update-index --add --cacheinfo 100644,$b,Xgit/config && python3 -c '
import hashlib
d = bytearray(open(".git/index", "rb").read())
i = d.find(b"Xgit/config"); d[i:i+4] = b".git"
d = d[:-20]; d += hashlib.sha1(d).digest()
open(".git/index", "wb").write(d)'`, root, root))
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Len(t, res.Quarantined, 1, "%+v", res.Quarantined)
	q := res.Quarantined[0]
	assert.Equal(t, filepath.Join(root, ".git", "index"), q.Path)
	assert.True(t, strings.HasPrefix(filepath.Base(q.MovedTo), "index"+quarantineSuffix), "%+v", q)
	assert.Contains(t, q.Why, `".git/config"`)
	assert.NoFileExists(t, filepath.Join(root, ".git", "index"))

	root = newRepo(t)
	marks := t.TempDir()
	spec := gitAttackSpec(t, desyncAttack(), root, root)
	spec.Env = append(spec.Env, "MARKS="+marks)
	res, out, errOut = run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Len(t, res.Quarantined, 2, "%+v", res.Quarantined)
	quarantined(t, filepath.Join(root, "sub"))
	assert.Equal(t, filepath.Join(root, ".git", "index"), res.Quarantined[1].Path)
}
