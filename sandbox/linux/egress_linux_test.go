// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/netstack"
	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// A plugin session's grant by destination holds for the plugin process and for every
// command it runs: both runs share one namespace; the granted host answers, another host
// port does not; a run without the grant has no network at all.
//
// The stub launcher (as every unprivileged run) gives each run a namespace of its own,
// served by the same engine: the same decisions and one record stream.
func TestEgressSharedByPluginAndCommands(t *testing.T) {
	for _, l := range []string{LaunchThread, LaunchStub} {
		t.Run(l, func(t *testing.T) { testEgressShared(t, l) })
	}
}

func testEgressShared(t *testing.T, launch string) {
	sb := newSandbox(t, Options{Launch: launch})
	if err := netstack.Supported(); err != nil || sb.egressErr != nil {
		testutil.SkipUnlessSupported(t, false, fmt.Sprintf("egress namespace: %v %v", err, sb.egressErr))
	}
	var hits [2]int
	var mu sync.Mutex
	srv := func(i int) (string, *httptest.Server) {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[i]++
			mu.Unlock()
			fmt.Fprint(w, "ok", i)
		}))
		t.Cleanup(s.Close)
		return s.URL[strings.LastIndex(s.URL, ":")+1:], s
	}
	okPort, _ := srv(0)
	badPort, _ := srv(1)
	pol, err := egress.NewPolicy(false, []string{"localhost:" + okPort})
	require.NoError(t, err)
	eg := egress.NewSession(pol, egress.Limits{})
	var recs []egress.Event
	eg.SetRecord(func(ev egress.Event) { mu.Lock(); recs = append(recs, ev); mu.Unlock() })
	defer eg.Close()

	curl := func(spec *sandbox.Spec, port string) (int, string) {
		spec.Path, spec.Args = "/usr/bin/curl", []string{"curl", "-sS", "--max-time", "5", "http://localhost:" + port + "/"}
		res, out, errOut := run(t, sb, spec)
		return res.ExitCode, out + errOut
	}
	e := newEnv(t)
	for _, kind := range []sandbox.Kind{sandbox.KindPlugin, sandbox.KindExec} {
		spec := e.spec("")
		spec.Kind, spec.Egress = kind, eg
		// The kernel's refusal records too: the stub hands back its seccomp listener and
		// the run's namespace, each on a socket of its own.
		spec.KernelDenials = func(sandbox.KernelDenial) {}
		code, out := curl(spec, okPort)
		assert.Equal(t, 0, code, "%s to the granted port: %s", kind, out)
		assert.Equal(t, "ok0", out, kind)
		spec = e.spec("")
		spec.Kind, spec.Egress = kind, eg
		code, out = curl(spec, badPort)
		assert.NotEqual(t, 0, code, "%s reached an ungranted port: %s", kind, out)
	}
	// No grant: no network, not even the host's loopback.
	spec := e.spec("")
	code, out := curl(spec, okPort)
	assert.NotEqual(t, 0, code, "a run without network reached the host: %s", out)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, hits[0])
	assert.Equal(t, 0, hits[1])
	allow := 0
	for _, r := range recs {
		if r.Kind == egress.EventConnect && r.Allow && r.Port != 0 {
			allow++
		}
	}
	assert.Equal(t, 2, allow, "%+v", recs)
	if launch == LaunchStub {
		st, err := eg.State(func() (any, func() error, error) { return nil, nil, errNoSession })
		require.NoError(t, err)
		assert.Zero(t, st.(*netstack.Engine).Links(), "every run's namespace is let go once the run ends")
	}
	_ = net.IPv4len
}

// Where the session's namespace cannot be made or joined (here: the stub launcher without
// network namespaces, as for an unprivileged run where the kernel refuses one), strict
// refuses the run, and otherwise the run goes on with no network at all, never more, and
// says so in its mode.
func TestEgressUnavailableStrictOrNoNetwork(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchStub, DisableNetNS: true, DisableEgressProxy: true})
	require.ErrorIs(t, sb.egressErr, errEgressNoNetNS)
	var hits int
	var mu sync.Mutex
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	defer s.Close()
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	pol, err := egress.NewPolicy(false, []string{"localhost:" + port})
	require.NoError(t, err)
	eg := egress.NewSession(pol, egress.Limits{})
	defer eg.Close()
	e := newEnv(t)

	spec := e.spec("")
	spec.Egress, spec.Strict = eg, true
	spec.Path, spec.Args = "/usr/bin/curl", []string{"curl", "-sS", "--max-time", "5", "http://localhost:" + port + "/"}
	_, err = sb.Start(t.Context(), spec)
	require.ErrorIs(t, err, sandbox.ErrUnavailable)
	assert.Contains(t, err.Error(), "network by destination")

	spec = e.spec("")
	spec.Egress = eg
	spec.Path, spec.Args = "/usr/bin/curl", []string{"curl", "-sS", "--max-time", "5", "http://localhost:" + port + "/"}
	res, out, errOut := run(t, sb, spec)
	assert.NotEqual(t, 0, res.ExitCode, "degraded run reached the network: %s%s", out, errOut)
	assert.Contains(t, strings.Join(res.Mode.Degraded, "; "), "network by destination")
	mu.Lock()
	assert.Equal(t, 0, hits)
	mu.Unlock()
}

// The stub waits for fledge to serve the namespace it built: when fledge cannot (here the
// attach refuses), the launch fails and the program never runs; the fds it was handed are
// all closed. A stub that cannot build the namespace (no CAP_NET_ADMIN over it: not cloned
// into one of its own) fails the launch at its "network" step.
func TestEgressHandOffFailureRunsNothing(t *testing.T) {
	if err := netstack.Supported(); err != nil {
		testutil.SkipUnlessSupported(t, false, fmt.Sprintf("egress namespace: %v", err))
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	e := newEnv(t)
	marker := filepath.Join(e.project, "ran")
	start := func(sys *syscall.SysProcAttr, attach func(*kernel.EgressFDs) error) error {
		stdio, err := stub.OpenStdio(nil, nil, nil)
		require.NoError(t, err)
		defer stdio.Abort()
		l := &stub.Launch{StubPath: exe,
			Policy: &stub.Policy{Path: "/bin/sh", Args: []string{"sh", "-c", ": > " + marker}, Env: []string{"PATH=/usr/bin:/bin"},
				Net: &kernel.EgressNet{TUN: "tun0", Addr: [4]byte{10, 77, 0, 2}, MTU: 1500, LoopPorts: []uint16{8080}}},
			Stdin: stdio.Files[0], Stdout: stdio.Files[1], Stderr: stdio.Files[2], Sys: sys, NetAttach: attach}
		p, err := l.Start()
		stdio.Started()
		if err == nil {
			_, _ = p.Wait()
		}
		return err
	}
	var got []int
	err = start(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}, func(fds *kernel.EgressFDs) error {
		got = fds.All()
		for _, fd := range got {
			_ = unix.Close(fd)
		}
		return errors.New("refused by the test")
	})
	require.ErrorIs(t, err, sandbox.ErrLaunch)
	require.ErrorIs(t, err, stub.ErrNetHandOff)
	assert.Len(t, got, 2, "the TUN device and the loopback port's listener")
	assert.NoFileExists(t, marker, "the program ran in a namespace nobody serves")

	// Positive control: served, the program runs.
	err = start(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}, func(fds *kernel.EgressFDs) error {
		for _, fd := range fds.All() {
			_ = unix.Close(fd)
		}
		return nil
	})
	require.NoError(t, err)
	assert.FileExists(t, marker)
	require.NoError(t, os.Remove(marker))

	if os.Geteuid() != 0 {
		return
	}
	// Not cloned into a namespace of its own: as root the stub would add tun0 to the
	// host's namespace; it refuses (not a fresh namespace) before anything runs.
	err = start(&syscall.SysProcAttr{}, func(fds *kernel.EgressFDs) error {
		t.Error("the stub built its network in the host's namespace")
		return nil
	})
	require.ErrorIs(t, err, stub.ErrStubFailed)
	assert.Contains(t, err.Error(), "not a fresh network namespace")
	assert.NoFileExists(t, marker)
	_, err = net.InterfaceByName("tun0")
	assert.Error(t, err, "tun0 in the host's namespace")
	// A user's stub without CAP_NET_ADMIN over its namespace (here: in a user namespace of
	// its own, but the host's network namespace) fails the same way.
	err = start(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER, UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}, func(fds *kernel.EgressFDs) error {
		t.Error("the stub built a namespace without holding CAP_NET_ADMIN over one")
		return nil
	})
	require.ErrorIs(t, err, stub.ErrStubFailed)
	assert.Contains(t, err.Error(), "network")
	assert.NoFileExists(t, marker)
}

// Where no namespace can be made (the stub launcher without network namespaces, as an
// ordinary user's run where the kernel refuses user namespaces), network by destination
// goes through the session's proxy: curl, given the proxy variables, reaches the granted
// port and not another; curl ignoring them, and a connect to the proxy's port at another
// loopback address, reach nothing; the records are the engine's.
func TestEgressViaProxyWithoutNetns(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchStub, DisableNetNS: true})
	require.ErrorIs(t, sb.egressErr, errEgressNoNetNS)
	if err := sb.proxyEgress(); err != nil {
		testutil.SkipUnlessSupported(t, false, "the session's proxy: "+err.Error())
	}
	assert.Equal(t, ProxyReport, sb.Report().NetworkEgress)
	var hits [2]int
	var mu sync.Mutex
	srv := func(i int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[i]++
			mu.Unlock()
			fmt.Fprint(w, "ok", i)
		}))
		t.Cleanup(s.Close)
		return s.URL[strings.LastIndex(s.URL, ":")+1:]
	}
	okPort, badPort := srv(0), srv(1)
	pol, err := egress.NewPolicy(false, []string{"localhost:" + okPort})
	require.NoError(t, err)
	var recMu sync.Mutex
	var recs []egress.Event
	eg := egress.NewSession(pol, egress.Limits{})
	eg.SetRecord(func(ev egress.Event) { recMu.Lock(); recs = append(recs, ev); recMu.Unlock() })
	defer eg.Close()
	e := newEnv(t)
	curl := func(args ...string) (int, string) {
		spec := e.spec("")
		spec.Egress = eg
		spec.Path, spec.Args = "/usr/bin/curl", append([]string{"curl", "-sS", "--max-time", "5"}, args...)
		res, out, errOut := run(t, sb, spec)
		assert.False(t, res.Mode.NetNS)
		assert.NotContains(t, strings.Join(res.Mode.Degraded, "; "), "network by destination")
		return res.ExitCode, out + errOut
	}
	code, out := curl("http://localhost:" + okPort + "/")
	assert.Equal(t, 0, code, out)
	assert.Equal(t, "ok0", out)
	code, out = curl("-f", "http://localhost:"+badPort+"/")
	assert.NotEqual(t, 0, code, out)
	code, out = curl("--noproxy", "*", "http://localhost:"+okPort+"/")
	assert.NotEqual(t, 0, code, out)
	st, err := eg.State(func() (any, func() error, error) { return nil, nil, errNoSession })
	require.NoError(t, err)
	p, err := st.(*netstack.Engine).StartProxy()
	require.NoError(t, err)
	code, out = curl("--noproxy", "*", fmt.Sprintf("http://127.0.0.2:%d/", p.Port()))
	assert.NotEqual(t, 0, code, out)
	mu.Lock()
	assert.Equal(t, [2]int{1, 0}, hits)
	mu.Unlock()
	recMu.Lock()
	defer recMu.Unlock()
	var allow, deny int
	for _, r := range recs {
		if r.Kind == egress.EventConnect && r.Allow {
			allow++
		}
		if r.Kind == egress.EventConnect && !r.Allow && r.Reason == egress.ReasonNotGranted {
			deny++
		}
	}
	assert.Equal(t, 1, allow, "%+v", recs)
	assert.Equal(t, 1, deny, "%+v", recs)
}
