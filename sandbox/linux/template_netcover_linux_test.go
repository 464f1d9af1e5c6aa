// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestViewTemplateNetCoversNoChurn: runs of one session alternating between the network
// granted and denied keep two templates (one per cover set), each entered by every run of
// its kind: the network covers' key and identities are stable from run to run, so the
// exec path does not build a template per run.
func TestViewTemplateNetCoversNoChurn(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root (only a root fledge's views cover /proc)")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	e := newEnv(t)
	const n = 50
	for i := 0; i < 2*n; i++ {
		spec := e.spec(`:`)
		spec.Network = i%2 == 1
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	}
	sb.templates.mu.Lock()
	defer sb.templates.mu.Unlock()
	require.Len(t, sb.templates.m, 2, "one template per cover set")
	for _, v := range sb.templates.m {
		assert.EqualValues(t, n, v.t.Entered(), "every run of its kind entered the template")
	}
}

// TestTemplateIdentitiesNetCoversUnderSubsetPid: with fledge's /proc a procfs of the
// processes only (subset=pid: fledge as a systemd service with ProcSubset=pid), a
// template's network covers are still checked against their inodes. An interface removed
// and added again under the same name (a VPN's tun0) has a new stable_secret the old
// template's cover is not on; its identity must change, or the run granted the network is
// launched from the old template and reads the host's secret. Checked in a network
// namespace of the test's own, with a tun interface made, removed and made again.
func TestTemplateIdentitiesNetCoversUnderSubsetPid(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("not supported, skipping: no ip(8) (%v)", err)
	}
	const ifname = "fltest0"
	const secret = "sys/net/ipv6/conf/" + ifname + "/stable_secret"
	v := &kernel.View{ProcMask: []string{secret}}
	var before, again, after map[string]fileID
	var serr error
	var lacks, present bool
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
		return nil
	}
	// Never the main thread: the runtime keeps a locked main thread whose goroutine
	// exits (wedged, not ended), and /proc/self would then show this namespace to every
	// later test of the process.
	onDiscardedThread(func() {
		if serr = unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWNET); serr != nil {
			return
		}
		if serr = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); serr != nil {
			return
		}
		if serr = ip("tuntap", "add", "dev", ifname, "mode", "tun"); serr != nil {
			return
		}
		_, err := os.Lstat("/proc/" + secret)
		present = err == nil
		if serr = unix.Mount("proc", "/proc", "proc", unix.MS_RDONLY, "subset=pid"); serr != nil {
			return
		}
		_, err = os.Lstat("/proc/" + secret)
		lacks = errors.Is(err, os.ErrNotExist)
		if before, serr = identities(v); serr != nil {
			return
		}
		if again, serr = identities(v); serr != nil {
			return
		}
		if serr = ip("tuntap", "del", "dev", ifname, "mode", "tun"); serr != nil {
			return
		}
		if serr = ip("tuntap", "add", "dev", ifname, "mode", "tun"); serr != nil {
			return
		}
		after, serr = identities(v)
	})
	if errors.Is(serr, unix.EINVAL) && !lacks {
		t.Skipf("not supported, skipping: no subset=pid here (%v)", serr)
	}
	require.NoError(t, serr)
	require.True(t, present, "control: the tun interface has an IPv6 stable_secret")
	require.True(t, lacks, "control: a subset=pid procfs has no /proc/sys")
	assert.NotEqual(t, fileID{}, before["proc:"+secret], "the covered secret's identity is known")
	assert.Equal(t, before, again, "the same interface: the same identity (no template per run)")
	assert.NotEqual(t, before["proc:"+secret], after["proc:"+secret],
		"the interface made again: a new identity, so a new template covers it")
}

// TestViewTemplateConcurrentNetGrants: runs of one session started at once, half granted
// the network and half denied it, each get the covers of their own kind: every run granted
// the network is refused the host's network secrets, whichever template the other kind
// made or is making meanwhile.
func TestViewTemplateConcurrentNetGrants(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "needs root (a user's commands are not uid 0)")
	files := hostNetSecretFiles(t)
	require.NotEmpty(t, files, "control: this namespace has root-only network secrets")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	e := newEnv(t)
	const n = 12
	outs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spec := e.spec(`for f; do if (: < "$f") 2>/dev/null; then echo "OPENED $f"; fi; done; echo done`,
				append([]string{"sh"}, files...)...)
			spec.Network = i%2 == 1
			res, out, errOut := run(t, sb, spec)
			assert.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			outs[i] = out
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if i%2 == 1 {
			assert.Equal(t, "done\n", out, "run %d, granted the network, opened the host's secrets", i)
		} else {
			assert.Contains(t, out, "OPENED /proc/sys/net/ipv4/tcp_fastopen_key\n",
				"control: run %d, denied the network, opens its own namespace's key", i)
		}
	}
	sb.templates.mu.Lock()
	defer sb.templates.mu.Unlock()
	assert.Len(t, sb.templates.m, 2, "one template per cover set")
}
