// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPidNamespaceHolderReplaced: a holder that died (killed on the host, the OOM killer)
// is replaced by the next launch of its plugin, and that run works as the first did: it is
// pid 1's child in a new namespace, and its /proc (the new holder's procfs, allowed by
// Landlock) is readable. The Landlock ruleset cache and the view templates are keyed by
// the procfs, so the new one must not be served a ruleset or template of the dead one.
func TestPidNamespaceHolderReplaced(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	requireLandlock(t, sb)
	e := newEnv(t)
	const script = `head -1 /proc/self/status && ls /proc/1/ >/dev/null && echo proc-ok`
	holder := func() *pidHolder {
		sb.pidns.mu.Lock()
		defer sb.pidns.mu.Unlock()
		require.Len(t, sb.pidns.holders, 1)
		for _, h := range sb.pidns.holders {
			return h
		}
		return nil
	}
	res, out, errOut := run(t, sb, e.spec(script))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.Equal(t, "Name:\thead\nproc-ok\n", out)
	for i := range 6 {
		h := holder()
		require.NoError(t, h.proc.Signal(syscall.SIGKILL))
		// Give the host's reaper time to reap it; then the next launch must start anew.
		deadline := time.Now().Add(5 * time.Second)
		for h.alive() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		require.False(t, h.alive(), "the killed holder is reaped")
		res, out, errOut := run(t, sb, e.spec(script))
		assert.Equal(t, 0, res.ExitCode, "run %d after the holder was killed: %s%s", i, out, errOut)
		assert.Equal(t, "Name:\thead\nproc-ok\n", out, "run %d after the holder was killed: %s", i, errOut)
		assert.NotSame(t, h, holder(), "a new holder")
		if t.Failed() {
			fmt.Println("old procFD", h.procFD, "new procFD", holder().procFD)
			return
		}
	}
}

// TestViewTemplatePerPluginProc: two plugins with the same grants have two pid namespaces,
// so their views must not share a template (the template holds its namespace's /proc):
// the second plugin's command must see its own /proc, readable, with itself in it.
func TestViewTemplatePerPluginProc(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	e := newEnv(t)
	const script = `head -1 /proc/self/status && ls /proc/1/ >/dev/null && echo proc-ok`
	for _, name := range []string{"plugin-a", "plugin-b"} {
		spec := e.spec(script)
		spec.Name = name
		res, out, errOut := run(t, sb, spec)
		assert.Equal(t, 0, res.ExitCode, "%s: %s%s", name, out, errOut)
		assert.Equal(t, "Name:\thead\nproc-ok\n", out, "%s: %s", name, errOut)
	}
	sb.pidns.mu.Lock()
	assert.Len(t, sb.pidns.holders, 2, "a pid namespace per plugin")
	sb.pidns.mu.Unlock()
}

// TestViewTemplateCrossPluginProcWithoutLandlock: on a kernel without Landlock (lsm= lacks
// it; the run is degraded, not refused) the pid namespace and the view are what keep one
// plugin's commands from another's. Plugin B, with the same grants as plugin A, must not
// see A's running command (its argv carries a secret) in its /proc.
func TestViewTemplateCrossPluginProcWithoutLandlock(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableLandlock: true})
	requirePidNS(t, sb)
	e := newEnv(t)
	a := e.spec("")
	a.Args = []string{"sh", "-c", `sleep 30; : "$0"`, "SECRET-OF-A"}
	a.Name = "plugin-a"
	a.Env = append(a.Env, "TOKEN=SECRET-ENV-OF-A")
	pa, err := sb.Start(context.Background(), a)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pa.Kill(); waitFor(t, pa) })
	b := e.spec(`cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\0' ' '; echo; echo self=$(readlink /proc/self)`)
	b.Name = "plugin-b"
	res, out, errOut := run(t, sb, b)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.NotContains(t, out, "SECRET-OF-A", "plugin B reads plugin A's command line")
	assert.NotContains(t, out, "SECRET-ENV-OF-A", "plugin B reads plugin A's environment")
	assert.NotContains(t, out, "self=\n", "plugin B's /proc is not its own")
}

// TestPidNamespaceLaunchRightAfterHolderDeath: the launch right after a holder died (not
// yet reaped by the host) must start a new holder, not join the dying namespace (where
// fork fails with ENOMEM, "cannot allocate memory").
func TestPidNamespaceLaunchRightAfterHolderDeath(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread, DisableViewTemplate: true})
	requirePidNS(t, sb)
	e := newEnv(t)
	for i := range 10 {
		spec := e.spec(`echo ok`)
		var out bytes.Buffer
		spec.Stdout = &out
		p, err := sb.Start(context.Background(), spec)
		if !assert.NoError(t, err, "launch %d, right after the holder was killed", i) {
			return
		}
		res := waitFor(t, p)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, "ok\n", out.String())
		sb.pidns.mu.Lock()
		var killed []*pidHolder
		for _, h := range sb.pidns.holders {
			_ = h.proc.Signal(syscall.SIGKILL)
			killed = append(killed, h)
		}
		sb.pidns.mu.Unlock()
		// Wait until each holder has exited (a zombie or reaped), not merely been signalled:
		// a launch between kill(2) and the holder acting on it joins a namespace that is still
		// whole and is then torn down with it (exit 137), which is the killed namespace taking
		// its processes along, not the dying-namespace launch this test is about.
		deadline := time.Now().Add(5 * time.Second)
		for _, h := range killed {
			for h.alive() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			require.False(t, h.alive(), "holder %d still runs 5 s after SIGKILL", h.proc.Pid)
		}
	}
}
