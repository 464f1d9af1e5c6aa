// SPDX-License-Identifier: MIT

package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestMaskProcInterfaceComesAndGoes: an interface removed or added by another process
// while a run's covers are found and made is skipped, never a failure of the run: 1000
// views' secrets found and covered in a network namespace of the test's own while another
// process removes and adds the covered interface again and again.
func TestMaskProcInterfaceComesAndGoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not supported, skipping: needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("not supported, skipping: no ip(8) (%v)", err)
	}
	const ifname = "fltest1"
	names := []string{"sys/net/ipv4/tcp_fastopen_key", "sys/net/ipv6/conf/" + ifname + "/stable_secret"}
	dir := t.TempDir()
	var fails []error
	var setup error
	covered, skipped := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its namespaces
		if setup = unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWNET); setup != nil {
			return
		}
		if setup = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); setup != nil {
			return
		}
		if setup = unix.Mount("tmpfs", dir, "tmpfs", 0, ""); setup != nil {
			return
		}
		// Another process flaps the interface in this namespace.
		flap := exec.Command("sh", "-c", `while :; do ip tuntap add dev `+ifname+` mode tun; ip tuntap del dev `+ifname+` mode tun; done 2>/dev/null`)
		if setup = flap.Start(); setup != nil {
			return
		}
		defer func() { _ = flap.Process.Kill(); _ = flap.Wait() }()
		deadline := time.Now().Add(10 * time.Second)
		// 1000 views, and on until the interface was there for one (a loaded machine may
		// start the flapping late), within the deadline.
		for i := 0; (i < 1000 || covered == 0) && time.Now().Before(deadline); i++ {
			proc := filepath.Join(dir, fmt.Sprint("p", i))
			if err := os.Mkdir(proc, 0o755); err != nil {
				fails = append(fails, err)
				return
			}
			if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
				fails = append(fails, err)
				return
			}
			if _, err := scanNetRootOnlyProc(proc); err != nil {
				fails = append(fails, err)
			}
			if err := maskProc(proc, filepath.Join(dir, fmt.Sprint("m", i)), names); err != nil {
				fails = append(fails, err)
			}
			var st unix.Stat_t
			if unix.Stat(proc+"/"+names[1], &st) == nil && st.Mode&0o777 == 0 {
				covered++
			} else {
				skipped++
			}
			_ = unix.Unmount(proc, unix.MNT_DETACH)
		}
	}()
	<-done
	require.NoError(t, setup)
	t.Logf("covered %d, interface absent or gone %d", covered, skipped)
	require.Empty(t, fails, "a view's covers failed as an interface came or went")
	// Control: the flapping interface was there for some views, so the race was run (a
	// loop whose ip(8) never made the interface would pass without trying anything).
	require.NotZero(t, covered, "the interface was never there to cover")
}
