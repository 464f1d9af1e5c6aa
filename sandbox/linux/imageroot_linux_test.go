// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// imageRootfs is a small "image": the host's /bin/sh and the libraries it loads, copied to
// the same paths, and /etc/marker.
func imageRootfs(t *testing.T) string {
	t.Helper()
	sh, err := filepath.EvalSymlinks("/bin/sh")
	require.NoError(t, err)
	out, err := exec.Command("ldd", sh).Output()
	testutil.SkipUnlessSupported(t, err == nil, "needs ldd to copy /bin/sh's libraries")
	files := append([]string{sh}, regexp.MustCompile(`(/[^ \t\n]+)`).FindAllString(string(out), -1)...)
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		dst := filepath.Join(root, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, b, 0o755))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	if sh != "/bin/sh" {
		_ = os.Symlink(sh, filepath.Join(root, "bin", "sh"))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "marker"), []byte("from the image\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "app"), 0o755))
	return root
}

// An image as the root of the view: the program runs from it, sees its files and not the
// host's system paths, writes nothing into it, and sees the granted project on top. The
// image has symlinks where the grants' mount points go (its first element, leading into
// the host's tree as it is reached while the view is built, /oldroot): the view is built
// without following them, and nothing is made through them.
func TestImageRootView(t *testing.T) {
	for _, l := range viewLaunchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			root := imageRootfs(t)
			require.NoError(t, os.WriteFile(filepath.Join(e.project, "file"), []byte("project file\n"), 0o644))
			top := strings.Split(strings.TrimPrefix(e.project, "/"), "/")[0]
			require.NoError(t, os.Symlink("/oldroot"+e.outside, filepath.Join(root, top)))
			if top != "tmp" {
				require.NoError(t, os.Symlink("/oldroot"+e.outside, filepath.Join(root, "tmp")))
			}
			require.NoError(t, os.Symlink("/oldroot"+e.outside, filepath.Join(root, "dev")))
			// Shell builtins only: the image has nothing but sh.
			spec := e.spec(`read l < /etc/marker && echo "$l"; test -e /etc/passwd && echo HOST-ETC; read p < "$0"/file && echo "$p"
(: > /app/x) 2>/dev/null && echo ROOT-WRITABLE; (: > "$0"/written) && echo PROJECT-WRITABLE; pwd; echo /*; read r < /etc/resolv.conf && echo "RESOLV $r"`, e.project)
			spec.Access.ReadExec = nil
			spec.Root, spec.RootDir = root, "/app"
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "stdout: %s\nstderr: %s", out, errOut)
			assert.Contains(t, out, "from the image")
			assert.NotContains(t, out, "HOST-ETC")
			assert.Contains(t, out, "project file")
			assert.NotContains(t, out, "ROOT-WRITABLE")
			assert.Contains(t, out, "PROJECT-WRITABLE")
			assert.Contains(t, out, "\n/app\n", "the image's working dir")
			if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
				first, _, _ := strings.Cut(string(b), "\n")
				assert.Contains(t, out, "RESOLV "+strings.TrimSpace(first), "the host's resolver configuration")
			}
			assert.NoFileExists(t, filepath.Join(root, "app", "x"))
			ents, err := os.ReadDir(e.outside)
			require.NoError(t, err)
			assert.Empty(t, ents, "nothing is made through the image's symlinks")
			assert.NoFileExists(t, filepath.Join(root, "etc", "x"))
		})
	}
}

// A Root this sandbox cannot take is refused, not run against the host's files.
func TestImageRootRefusedWhenUnusable(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	e := newEnv(t)
	spec := e.spec("true")
	spec.Root = filepath.Join(t.TempDir(), "a,b")
	require.NoError(t, os.Mkdir(spec.Root, 0o755))
	_, err := sb.Start(t.Context(), spec)
	require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
}

// The image's Landlock rules name its own files, never a whole directory on the way to a
// grant or a denied path: an image's /root holds the config dir of a root fledge (denied),
// its /home the project.
func TestImageRulesStopShortOfGrantsAndDeniedPaths(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "root/.config/other", "home/node/app", "proc", "tmp", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "root", ".bashrc"), nil, 0o644))
	require.NoError(t, os.Symlink("/root/.config", filepath.Join(root, "cfg")))
	got, err := imageRules(root, []string{"/root/.config/fledge", "/home/u/project", "/etc"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"/usr", "/root/.bashrc", "/root/.config/other", "/home/node"}, got)
}
