// SPDX-License-Identifier: MIT

package linux

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// A run denied the network with no network namespace of its own (an ordinary user on a
// host without user namespaces) has Landlock's TCP rules as its only network bound, and
// they see TCP connect(2) only: a UDP datagram (below Landlock ABI 10), an SCTP stream
// socket and a TCP Fast Open connect by sendto would leave the machine past them. Each is
// refused, and nothing reaches the host's listeners.
func TestNoNetnsRunSendsNoDatagramNorFastOpen(t *testing.T) {
	sb := newSandbox(t, Options{DisableNetNS: true})
	testutil.SkipUnlessSupported(t, sb.abi >= 4 && kernel.SeccompSupported(), "Landlock network rules (ABI 4) and the seccomp filter")
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer udp.Close()
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer tcp.Close()
	got := make(chan string, 4)
	go func() {
		b := make([]byte, 64)
		if n, _, err := udp.ReadFrom(b); err == nil {
			got <- "udp:" + string(b[:n])
		}
	}()
	go func() {
		if c, err := tcp.Accept(); err == nil {
			got <- "tcp"
			c.Close()
		}
	}()
	script := `
import socket, sys
def try_(what, f):
    try:
        f(); print(what, "ok")
    except OSError as e:
        print(what, "denied", e.errno)
u, t = int(sys.argv[1]), int(sys.argv[2])
try_("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"leak", ("127.0.0.1", u)))
try_("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
try_("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
try_("fastopen", lambda: socket.socket().sendto(b"leak", 0x20000000, ("127.0.0.1", t)))
try_("tcp-socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 6))
`
	e := newEnv(t)
	spec := e.spec("")
	spec.Path, spec.Args = "/usr/bin/python3", []string{"python3", "-c", script,
		strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port), strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port)}
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	assert.Contains(t, out, "udp denied 13")
	assert.Contains(t, out, "udp6 denied 13")
	assert.Contains(t, out, "sctp denied 13")
	assert.Contains(t, out, "fastopen denied 13")
	assert.Contains(t, out, "tcp-socket ok", "TCP sockets stay (Landlock decides their connects)")
	select {
	case g := <-got:
		t.Fatalf("a run without network reached the host: %s", g)
	case <-time.After(200 * time.Millisecond):
	}
}
