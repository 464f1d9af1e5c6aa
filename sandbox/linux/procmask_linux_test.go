// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// rootOnlyProcFiles lists the files at the top of the host's /proc that only their owner,
// root, may read (mode 0400 and the like): what an ordinary user is refused.
func rootOnlyProcFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if m := fi.Mode().Perm(); m&0o400 != 0 && m&0o004 == 0 {
			out = append(out, "/proc/"+e.Name())
		}
	}
	return out
}

// TestViewProcHidesRootOnlyFiles: a root fledge's commands keep uid 0 without capabilities,
// and a procfs file's owner bits need none: /proc/slabinfo, /proc/vmallocinfo (physical
// addresses, the kernel's allocation sites), /proc/timer_list (every CPU's timers, the
// host's activity), /proc/kpageflags, kpagecount, kpagecgroup (physical memory) and
// /proc/pagetypeinfo are 0400 root, kept from ordinary users because they help kernel
// exploits and side channels. /proc/keys lists every key root may view (descriptions of
// root's keyrings, the NFS id mapper's names). The attack: a command reads each of them,
// and looks in /proc/keys for a key the host added to root's user keyring. The controls: the
// host reads each file and lists the key; the command still reads the files every program
// needs (cpuinfo, meminfo, stat, its own status).
func TestViewProcHidesRootOnlyFiles(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root (a user's commands are not uid 0)")
	files := rootOnlyProcFiles(t)
	require.NotEmpty(t, files, "control: the host's /proc has root-only files")
	for _, f := range files {
		if f == "/proc/kmsg" {
			continue // needs CAP_SYSLOG besides: root reading it here would consume the log
		}
		b := make([]byte, 8) // kpage* read whole 8-byte entries
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EACCES) {
			// Root of a user namespace (a container's) is not procfs's root: the owner
			// bits refuse it, and its commands, already.
			t.Skipf("not supported, skipping: uid 0 here is not the kernel's root (%s: %v)", f, err)
		}
		require.NoError(t, err, "control: root opens %s", f)
		_, err = unix.Read(fd, b)
		unix.Close(fd)
		require.NoError(t, err, "control: root reads %s", f)
	}
	desc := "fledge-host-key-" + randomID()
	key, err := unix.AddKey("user", desc, []byte("x"), unix.KEY_SPEC_USER_KEYRING)
	testutil.SkipUnlessSupported(t, err == nil, "cannot add a key to root's keyring")
	t.Cleanup(func() { _, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, key, 0, 0, 0) })
	host, err := os.ReadFile("/proc/keys")
	require.NoError(t, err)
	require.Contains(t, string(host), desc, "control: the host's /proc/keys lists root's key")

	launchers := append(viewLaunchers, struct {
		name string
		opts Options
	}{"thread-no-pidns", Options{Launch: LaunchThread, DisablePidNS: true}})
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			spec := e.spec(`for f in "$@"; do
  if head -c 8 "$f" >/dev/null 2>&1; then echo "READ $f"; else echo "REFUSED $f"; fi
done
echo "== keys"; cat /proc/keys /proc/key-users 2>&1; echo "== keys end"
grep ' /proc/keys ' /proc/self/mountinfo
for f in /proc/cpuinfo /proc/meminfo /proc/stat /proc/self/status /proc/uptime /proc/loadavg; do
  [ -s "$f" ] || head -c 1 "$f" | grep -q . && echo "OK $f"
done`, append(append([]string{"sh"}, files...), "/proc/keys", "/proc/key-users")...)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			var read []string
			for _, f := range append(append([]string{}, files...), "/proc/keys", "/proc/key-users") {
				if !strings.Contains(out, "REFUSED "+f+"\n") {
					read = append(read, f)
				}
			}
			assert.Empty(t, read, "a command reads root-only /proc files:\n%s", out)
			assert.NotContains(t, out, desc, "a command lists a key of root's")
			assert.NotContains(t, out, "keyring", "a command lists root's keyrings")
			assert.Regexp(t, `(?m)^\d+ \d+ \S+ \S+ /proc/keys ro,nosuid,nodev,noexec`, out, "the cover is read-only")
			for _, f := range []string{"cpuinfo", "meminfo", "stat", "self/status", "uptime", "loadavg"} {
				assert.Contains(t, out, "OK "+filepath.Join("/proc", f)+"\n", "a command still reads /proc/%s", f)
			}
		})
	}
}

// hostNetSecretFiles lists the per-network-namespace files of fledge's own namespace that
// only their owner may read and whose reading needs no capability: the TCP Fast Open
// server key and every interface's IPv6 stable-privacy secret.
func hostNetSecretFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	cands := []string{"/proc/sys/net/ipv4/tcp_fastopen_key"}
	ifs, _ := filepath.Glob("/proc/sys/net/ipv6/conf/*/stable_secret")
	for _, f := range append(cands, ifs...) {
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm()&0o004 == 0 {
			out = append(out, f)
		}
	}
	return out
}

// TestViewProcHidesHostNetSecrets: a run granted the network shares fledge's network
// namespace, and /proc/sys/net shows that namespace's sysctls to whoever reads them. Two of
// them are 0600 root and guarded by nothing else (no capability check on reading):
// net.ipv4.tcp_fastopen_key (the key of every TCP Fast Open cookie the host's servers hand
// out: with it a command forges cookies for any client address) and each interface's
// net.ipv6.conf.*.stable_secret (the secret of the host's stable-privacy IPv6 addresses:
// with it the host's addresses in any network can be predicted). A root fledge's command
// keeps uid 0 and reads them. The attack: a command opens each. The control: the host
// opens each (the open succeeds; stable_secret's read then says EIO while no secret is set,
// a cover's open says EACCES).
func TestViewProcHidesHostNetSecrets(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root (a user's commands are not uid 0)")
	files := hostNetSecretFiles(t)
	require.NotEmpty(t, files, "control: this namespace has root-only network secrets")
	for _, f := range files {
		fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EACCES) {
			t.Skipf("not supported, skipping: uid 0 here does not own the namespace's sysctls (%s: %v)", f, err)
		}
		require.NoError(t, err, "control: root opens %s", f)
		unix.Close(fd)
	}
	launchers := append(viewLaunchers, struct {
		name string
		opts Options
	}{"thread-no-pidns", Options{Launch: LaunchThread, DisablePidNS: true}})
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			sb := newSandbox(t, l.opts)
			requireView(t, sb)
			e := newEnv(t)
			// A run denied the network first: the session's view template is made for it
			// (its covers leave the run's own namespace alone), and the run granted the
			// network must not be launched from it.
			res, out, errOut := run(t, sb, e.spec(`cat /proc/sys/net/ipv4/tcp_congestion_control`))
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			spec := e.spec(`/usr/bin/python3 -c '
import os, sys
for f in sys.argv[1:]:
    try:
        os.close(os.open(f, os.O_RDONLY)); print("OPENED", f)
    except PermissionError:
        print("REFUSED", f)
    except OSError as e:
        print("OTHER", f, e)
' "$@"
cat /proc/sys/net/ipv4/tcp_congestion_control /proc/sys/net/ipv6/conf/lo/disable_ipv6 2>&1`, append([]string{"sh"}, files...)...)
			spec.Network = true
			res, out, errOut = run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			for _, f := range files {
				assert.Contains(t, out, "REFUSED "+f+"\n", "a command granted the network opens %s", f)
			}
			assert.NotContains(t, out, "No such file", "the other network sysctls stay readable:\n%s", out)
		})
	}
}

// TestTemplateIdentitiesNameNetCovers: a template is checked before each use against the
// identities of what it covers; a network sysctl's (its interface removed and added again
// under the same name is a new inode) is among them, the kernel's own files are not.
func TestTemplateIdentitiesNameNetCovers(t *testing.T) {
	const secret = "sys/net/ipv6/conf/lo/stable_secret"
	if _, err := os.Lstat("/proc/" + secret); err != nil {
		t.Skipf("not supported, skipping: no IPv6 here (%v)", err)
	}
	ids, err := identities(&kernel.View{ProcMask: []string{"slabinfo", secret}})
	require.NoError(t, err)
	var st unix.Stat_t
	require.NoError(t, unix.Lstat("/proc/"+secret, &st))
	assert.Equal(t, fileID{st.Dev, st.Ino}, ids["proc:"+secret])
	assert.NotContains(t, ids, "proc:slabinfo")
}
