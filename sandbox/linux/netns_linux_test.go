// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestNetNSAheadFreshPerRun: runs without network enter namespaces made ahead
// (netns_linux.go). The attack: run A, still running, binds an abstract unix socket (which
// lives in its network namespace); run B, launched from the pool after it, lists the
// namespace's sockets and must not see A's, and the two runs' namespaces differ from each
// other and from the host's. The control breaks the pool on purpose (every namespace it
// hands out is the same one): B then sees A's socket, so the check can fail.
func TestNetNSAheadFreshPerRun(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "python3 not installed")
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.netns, "no network namespaces here")

	t.Run("fresh", func(t *testing.T) {
		aheadNetNS.drain()
		sameNS, sawA := netnsRunPair(t, sb)
		assert.False(t, sameNS, "two runs share a network namespace")
		assert.False(t, sawA, "run B sees run A's socket")
	})
	t.Run("control: a pool handing out one namespace twice", func(t *testing.T) {
		shared, err := makeNetNS()
		require.NoError(t, err)
		aheadNetNS.mu.Lock()
		aheadNetNS.makeForTest = func() (int, error) { return unix.FcntlInt(uintptr(shared), unix.F_DUPFD_CLOEXEC, 3) }
		aheadNetNS.mu.Unlock()
		aheadNetNS.drain() // after: whatever is made from here on is the broken pool's
		t.Cleanup(func() {
			aheadNetNS.mu.Lock()
			aheadNetNS.makeForTest = nil
			aheadNetNS.mu.Unlock()
			aheadNetNS.drain() // after: no namespace of the broken pool is left for later tests
			unix.Close(shared)
		})
		sameNS, sawA := netnsRunPair(t, sb)
		assert.True(t, sameNS, "control: both runs in the one namespace")
		assert.True(t, sawA, "control: run B sees run A's socket in a shared namespace")
	})
}

// netnsRunPair runs A (an abstract socket bound, held) and then B from the pool, and says
// whether they were in one namespace and whether B listed A's socket.
func netnsRunPair(t *testing.T, sb *Sandbox) (sameNS, sawA bool) {
	t.Helper()
	hostNS, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	e := newEnv(t)
	name := "fledge-netns-" + randomID()
	// A first run: the pool makes the next namespaces once it has ended.
	res, out, errOut := run(t, sb, e.spec("true"))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.Eventually(t, func() bool {
		aheadNetNS.mu.Lock()
		defer aheadNetNS.mu.Unlock()
		return len(aheadNetNS.ready) == netNSAhead
	}, 10*time.Second, time.Millisecond, "the pool is made after the first run")

	taken := aheadNetNS.taken.Load()
	outA := &testutil.SyncBuffer{}
	specA := e.spec(fmt.Sprintf(`readlink /proc/self/ns/net; exec /usr/bin/python3 -c '
import socket, time
s = socket.socket(socket.AF_UNIX)
s.bind("\0%s")
s.listen()
print("ready", flush=True)
time.sleep(30)'`, name))
	specA.UnixSockets = true
	specA.Stdout, specA.Stderr = outA, outA
	pa, err := sb.Start(context.Background(), specA)
	require.NoError(t, err)
	defer func() { _ = pa.Kill(); waitFor(t, pa) }()
	require.Eventually(t, func() bool { return strings.Contains(outA.String(), "ready") }, 10*time.Second, 5*time.Millisecond, "run A: %s", outA)

	specB := e.spec(`readlink /proc/self/ns/net; cat /proc/net/unix`)
	specB.UnixSockets = true
	resB, outB, errB := run(t, sb, specB)
	require.Equal(t, 0, resB.ExitCode, "%s%s", outB, errB)
	assert.Equal(t, taken+2, aheadNetNS.taken.Load(), "both runs entered a namespace made ahead")

	nsA, nsB := strings.SplitN(outA.String(), "\n", 2)[0], strings.SplitN(outB, "\n", 2)[0]
	require.True(t, strings.HasPrefix(nsA, "net:["), outA.String())
	require.True(t, strings.HasPrefix(nsB, "net:["), outB)
	assert.NotEqual(t, hostNS, nsA, "run A in the host's namespace")
	assert.NotEqual(t, hostNS, nsB, "run B in the host's namespace")
	return nsA == nsB, strings.Contains(outB, "@"+name)
}

// TestNetNSAheadNoFDLeak: many runs without network, side by side and one after another,
// some of whose launches fail after they took a namespace (a program that does not exist),
// leave the host holding no network namespace but the pool's ready ones, and no more fds
// than before.
func TestNetNSAheadNoFDLeak(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.netns, "no network namespaces here")
	e := newEnv(t)
	settle := func() (fds, netFDs, ready int) {
		// Once no namespace is being made and no run is left whose end makes more.
		require.Eventually(t, func() bool {
			aheadNetNS.mu.Lock()
			defer aheadNetNS.mu.Unlock()
			return !aheadNetNS.making
		}, 10*time.Second, time.Millisecond)
		sb.cleanups.Wait()
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		aheadNetNS.mu.Lock()
		defer aheadNetNS.mu.Unlock()
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		for _, ent := range ents {
			l, err := os.Readlink("/proc/self/fd/" + ent.Name())
			switch {
			case err != nil:
			case strings.HasPrefix(l, "net:["):
				netFDs++
			case l == "anon_inode:[landlock-ruleset]":
				continue // the bounded ruleset cache (sandbox/kernel), one per policy
			}
			fds++
		}
		return fds, netFDs, len(aheadNetNS.ready)
	}
	// Warm up: the sandbox's own fds (watchdog, pid namespace holder, templates) exist.
	for range 3 {
		res, out, errOut := run(t, sb, e.spec("true"))
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	}
	fds0, net0, ready0 := settle()
	taken0 := aheadNetNS.taken.Load()
	for round := range 10 {
		done := make(chan struct{}, 3)
		for range 3 {
			go func() {
				defer func() { done <- struct{}{} }()
				p, err := sb.Start(context.Background(), e.spec("true"))
				if assert.NoError(t, err) {
					waitFor(t, p)
				}
			}()
		}
		for range 3 {
			<-done
		}
		bad := e.spec("true")
		bad.Path = "/nonexistent/" + fmt.Sprint(round)
		_, err := sb.Start(context.Background(), bad)
		require.Error(t, err, "a launch of a program that does not exist")
	}
	fds1, net1, ready1 := settle()
	assert.Greater(t, aheadNetNS.taken.Load(), taken0, "runs entered namespaces made ahead")
	assert.Equal(t, net0-ready0, net1-ready1, "network namespaces held by the host beyond the pool's ready ones")
	assert.LessOrEqual(t, ready1, netNSAhead)
	assert.LessOrEqual(t, fds1-ready1, fds0-ready0, "fds of the host beyond the pool's ready namespaces (and the ruleset cache)")
}

// TestNetNSAheadOnlyWithoutNetwork: a run granted the network takes no namespace from the
// pool and stays in the host's (a pool namespace would cut it off, or hand it one meant for
// a run without network).
func TestNetNSAheadOnlyWithoutNetwork(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.netns, "no network namespaces here")
	// The launching threads' namespace (/proc/self is the main thread's, which a probe of
	// New may have left wedged in a namespace of its own).
	hostNS := threadNetNS(t)
	e := newEnv(t)
	// Namespaces ready in the pool: a run without network first, then its end.
	res, out, errOut := run(t, sb, e.spec("true"))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.Eventually(t, func() bool {
		aheadNetNS.mu.Lock()
		defer aheadNetNS.mu.Unlock()
		return len(aheadNetNS.ready) > 0
	}, 10*time.Second, time.Millisecond)
	taken := aheadNetNS.taken.Load()
	spec := e.spec("readlink /proc/self/ns/net")
	spec.Network = true
	res, out, errOut = run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, hostNS, strings.TrimSpace(out), "a run granted the network is in the host's namespace")
	assert.Equal(t, taken, aheadNetNS.taken.Load(), "a run granted the network took a namespace made ahead")
}

// threadNetNS is the network namespace of a thread of the host other than the main one.
func threadNetNS(t *testing.T) string {
	t.Helper()
	ns := make(chan string, 1)
	onDiscardedThread(func() {
		l, _ := os.Readlink("/proc/thread-self/ns/net")
		ns <- l
	})
	l := <-ns
	require.True(t, strings.HasPrefix(l, "net:["), l)
	return l
}

// TestNetNSAheadDistinctSideBySide: runs without network of two plugins, started side by
// side while the pool is being drawn from and refilled, are each in a namespace of their
// own (all alive at once, so no namespace number is reused among them), none the host's.
func TestNetNSAheadDistinctSideBySide(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.netns, "no network namespaces here")
	hostNS := threadNetNS(t)
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec("true"))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	taken := aheadNetNS.taken.Load()
	const n = 8
	outs := make([]string, n)
	done := make(chan struct{}, n)
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			spec := e.spec("readlink /proc/self/ns/net; sleep 1")
			spec.Name = fmt.Sprintf("plugin-%d", i%2)
			r, o, eo := run(t, sb, spec)
			assert.Equal(t, 0, r.ExitCode, "%s%s", o, eo)
			outs[i] = strings.TrimSpace(o)
		}()
	}
	for range n {
		<-done
	}
	seen := map[string]bool{}
	for _, ns := range outs {
		require.True(t, strings.HasPrefix(ns, "net:["), ns)
		assert.NotEqual(t, hostNS, ns, "a run without network in the host's namespace")
		assert.False(t, seen[ns], "two runs side by side share %s", ns)
		seen[ns] = true
	}
	assert.Greater(t, aheadNetNS.taken.Load(), taken, "some runs entered namespaces made ahead")
}

// TestNetNSProbeKeptForFirstRun: the namespace New's probe made is kept as one made ahead,
// and the first run without network enters it (no second namespace made for it). It is as
// fresh as any of the pool's: not the host's, nothing but a loopback device, no socket of
// anyone's.
func TestNetNSProbeKeptForFirstRun(t *testing.T) {
	aheadNetNS.drain()
	sb := newSandbox(t, Options{Launch: LaunchThread})
	testutil.SkipUnlessSupported(t, sb.netns, "no network namespaces here")
	aheadNetNS.mu.Lock()
	require.Len(t, aheadNetNS.ready, 1, "the probe's namespace is kept")
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(aheadNetNS.ready[0], &st))
	aheadNetNS.mu.Unlock()
	probeNS := fmt.Sprintf("net:[%d]", st.Ino)
	hostNS, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	taken := aheadNetNS.taken.Load()

	e := newEnv(t)
	spec := e.spec(`readlink /proc/self/ns/net; echo --; cat /proc/net/dev; echo --; cat /proc/net/unix`)
	spec.UnixSockets = true
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, taken+1, aheadNetNS.taken.Load(), "the first run entered a namespace made ahead")
	parts := strings.Split(out, "--\n")
	require.Len(t, parts, 3, out)
	ns := strings.TrimSpace(parts[0])
	assert.Equal(t, probeNS, ns, "the first run is in the probe's namespace")
	assert.NotEqual(t, hostNS, ns, "the first run is in the host's namespace")
	var ifaces []string
	for _, l := range strings.Split(parts[1], "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	assert.Equal(t, []string{"lo"}, ifaces, "devices of the probe's namespace")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(parts[2]), "\n")+1, "unix sockets in the probe's namespace: %s", parts[2])
}
