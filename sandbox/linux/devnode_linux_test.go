// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// devNodeProbe opens each path given for reading and says which opened (and what the
// first bytes of one that did are); then checks that the harmless devices every command
// gets still work.
const devNodeProbe = `for f in "$@"; do
  if (: <"$f") 2>/dev/null; then echo "OPENED $f"; head -c 15 "$f"; echo; else echo "refused $f"; fi
done
echo x > /dev/null && head -c 4 /dev/urandom | wc -c && head -c 2 /dev/zero | wc -c && echo devices-ok`

// loopDevice attaches a disk image holding secret to a free loop device (losetup, the
// real tool) for the test's lifetime and returns the device's number.
func loopDevice(t *testing.T, secret string) uint64 {
	t.Helper()
	_, err := exec.LookPath("losetup")
	testutil.SkipUnlessSupported(t, err == nil, "needs losetup to attach a disk image")
	img := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(img, append([]byte(secret), make([]byte, 64<<10-len(secret))...), 0o600))
	var stderr strings.Builder
	cmd := exec.Command("losetup", "--find", "--show", img)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	testutil.SkipUnlessSupported(t, err == nil, "no loop device: "+stderr.String())
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dev, &st))
	return st.Rdev
}

// TestAttackDeviceNodeInGrantedDir: a device node inside a granted directory (made with
// mknod by root, or a directory such as /dev granted whole) must not open for a root
// fledge's command. A block device node of a loop device holding a disk image, in a
// read-only grant and in the read-write project that is the working directory, reads the
// whole disk (keys included) if it opens; a char device must not open either, even a
// copy of /dev/null: no device node opens under a grant. Every bind of a grant is nodev in the view; /dev/null and the random devices, bound
// file by file, keep working.
func TestAttackDeviceNodeInGrantedDir(t *testing.T) {
	testutil.RequireContained(t)
	const secret = "SECRET-DISK-KEY"
	loop := loopDevice(t, secret)
	for _, c := range []struct {
		name string
		opts Options
		runs int
	}{
		{"stub", Options{Launch: LaunchStub}, 1},
		{"thread-template", Options{Launch: LaunchThread}, 3},
		{"thread-fresh", Options{Launch: LaunchThread, DisableViewTemplate: true}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t, c.opts)
			requireView(t, sb)
			e := newEnv(t)
			shared := filepath.Join(e.outside, "shared")
			require.NoError(t, os.MkdirAll(shared, 0o755))
			null := unix.Mkdev(1, 3)
			nodes := map[string]uint64{
				filepath.Join(shared, "disk"):    loop,
				filepath.Join(shared, "null"):    null,
				filepath.Join(e.project, "disk"): loop,
			}
			args := []string{"probe"}
			for p, dev := range nodes {
				kind := uint32(unix.S_IFBLK)
				if dev == null {
					kind = unix.S_IFCHR
				}
				require.NoError(t, unix.Mknod(p, kind|0o600, int(dev)))
				args = append(args, p)
			}
			for i := range c.runs {
				spec := e.spec(devNodeProbe, args...)
				spec.Access.ReadOnly = []string{shared}
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
				assert.NotContains(t, out, secret, "run %d: the disk was read through a granted dir", i)
				assert.NotContains(t, out, "OPENED ", "run %d: a device node in a grant opened:\n%s", i, out)
				for p := range nodes {
					assert.Contains(t, out, "refused "+p+"\n", "run %d", i)
				}
				assert.True(t, strings.HasSuffix(out, "4\n2\ndevices-ok\n"), fmt.Sprintf("run %d: the harmless devices: %q %s", i, out, errOut))
			}
		})
	}
}
