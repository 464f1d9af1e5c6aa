// SPDX-License-Identifier: MIT

package linux

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// ListenTCP lets a process without network bind the listed port and no other, and it
// still connects nowhere (invoke-v1 TCP plugins).
func TestListenTCPOnePortOnly(t *testing.T) {
	sb := newSandbox(t, Options{DisableNetNS: true}) // the Landlock rule itself, in this netns
	testutil.SkipUnlessSupported(t, sb.abi >= 4, "Landlock network rules need ABI 4")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()

	script := `
import socket, sys
def try_(what, f):
    try:
        f(); print(what, "ok")
    except OSError as e:
        print(what, "denied", e.errno)
p = int(sys.argv[1]); target = int(sys.argv[2])
s = socket.socket(); try_("bind-listed", lambda: s.bind(("127.0.0.1", p)))
s2 = socket.socket(); try_("bind-other", lambda: s2.bind(("127.0.0.1", p + 1 if p < 65535 else p - 1)))
s3 = socket.socket(); try_("connect", lambda: s3.connect(("127.0.0.1", target)))
`
	e := newEnv(t)
	spec := e.spec("")
	spec.Path, spec.Args = "/usr/bin/python3", []string{"python3", "-c", script, strconv.Itoa(port), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	spec.ListenTCP = []uint16{uint16(port)}
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	assert.Contains(t, out, "bind-listed ok")
	assert.Contains(t, out, "bind-other denied 13")
	assert.Contains(t, out, "connect denied 13")
	select {
	case <-accepted:
		t.Fatal("the host listener got a connection from a process without network")
	default:
	}

	// Without the port listed, nothing can be bound.
	spec2 := e.spec("")
	spec2.Path, spec2.Args = spec.Path, spec.Args
	res, out, _ = run(t, sb, spec2)
	require.Equal(t, 0, res.ExitCode)
	assert.Contains(t, out, "bind-listed denied 13")
}

// ListenAnyTCP: in the run's own network namespace any port binds (port 0, a fixed one) and
// the process still connects nowhere; without a namespace it is ignored (ListenTCP rules).
func TestListenAnyTCPOnlyInOwnNetns(t *testing.T) {
	script := `
import socket
def try_(what, f):
    try:
        f(); print(what, "ok")
    except OSError as e:
        print(what, "denied", e.errno)
s = socket.socket(); try_("bind-zero", lambda: s.bind(("127.0.0.1", 0)))
s2 = socket.socket(); try_("bind-fixed", lambda: s2.bind(("127.0.0.1", 5003)))
s3 = socket.socket(); try_("connect", lambda: s3.connect(("1.1.1.1", 443)))
`
	for _, tc := range []struct {
		name    string
		noNetns bool
		want    []string
	}{
		{"own netns", false, []string{"bind-zero ok", "bind-fixed ok", "connect denied"}},
		{"no netns", true, []string{"bind-zero denied 13", "bind-fixed denied 13", "connect denied 13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, Options{DisableNetNS: tc.noNetns})
			testutil.SkipUnlessSupported(t, sb.abi >= 4, "Landlock network rules need ABI 4")
			if !tc.noNetns {
				testutil.SkipUnlessSupported(t, sb.netns, "no network namespaces here")
			}
			e := newEnv(t)
			spec := e.spec("")
			spec.Path, spec.Args = "/usr/bin/python3", []string{"python3", "-c", script}
			spec.ListenAnyTCP = true
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, errOut)
			for _, w := range tc.want {
				assert.Contains(t, out, w)
			}
		})
	}
}
