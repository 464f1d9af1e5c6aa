package linux

import (
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/fledgehq/fledge/internal/testutil"
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
