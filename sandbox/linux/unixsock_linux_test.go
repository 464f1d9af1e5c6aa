// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnixSocketsRefused attacks the way out that Landlock (below ABI 9) and a network
// namespace leave open: connecting to a host unix socket, as a command would to
// /var/run/docker.sock or the D-Bus system bus. The listener here stands in for them.
func TestUnixSocketsRefused(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the socket client")
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			sock := filepath.Join(e.outside, "daemon.sock")
			ln, err := net.Listen("unix", sock)
			require.NoError(t, err)
			defer ln.Close()
			var accepted atomic.Int32
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted.Add(1)
					c.Close()
				}
			}()
			client := `import socket, sys
try:
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("CONNECTED")
except OSError as e:
    print("refused:", e)
a, b = socket.socketpair(); a.send(b"x"); print("pair", b.recv(1))`
			spec := e.spec(`exec /usr/bin/python3 -c "$1" "$2"`, "sh", client, sock)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, errOut)
			assert.NotContains(t, out, "CONNECTED")
			assert.Contains(t, out, "Permission denied")
			assert.Contains(t, out, "pair b'x'", "socketpair still works")
			assert.EqualValues(t, 0, accepted.Load())

			// Policy can allow them; then the same client connects (the test can fail). In a
			// private filesystem view the socket must also be a granted path.
			spec = e.spec(`exec /usr/bin/python3 -c "$1" "$2"`, "sh", client, sock)
			spec.UnixSockets = true
			spec.Access.ReadWrite = append(spec.Access.ReadWrite, sock)
			res, out, errOut = run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, errOut)
			assert.Contains(t, out, "CONNECTED")
		})
	}
}

// TestVsockRefused: an AF_VSOCK socket reaches the hypervisor's and the host's vsock
// services past any network namespace or Landlock rule, so a command may not make one,
// whatever the unix-socket policy. The positive control makes one unconfined (the test then
// knows the kernel offers vsock here). Nothing is connected: no traffic leaves the machine.
func TestVsockRefused(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the socket client")
	client := `import socket
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print("MADE"); s.close()
except OSError as e:
    print("refused:", e.errno, e)`
	ctl, err := exec.Command("/usr/bin/python3", "-c", client).CombinedOutput()
	require.NoError(t, err, "%s", ctl)
	testutil.SkipUnlessSupported(t, strings.Contains(string(ctl), "MADE"), "this kernel offers no AF_VSOCK: "+string(ctl))
	for _, launch := range []string{LaunchThread, LaunchStub} {
		for _, allowUnix := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unix=%v", launch, allowUnix), func(t *testing.T) {
				sb := newSandbox(t, Options{Launch: launch})
				e := newEnv(t)
				spec := e.spec(`exec /usr/bin/python3 -c "$1"`, "sh", client)
				spec.UnixSockets = allowUnix
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, errOut)
				assert.NotContains(t, out, "MADE")
				assert.Contains(t, out, "refused: 13", "EACCES from the filter")
			})
		}
	}
}
