// SPDX-License-Identifier: MIT

package linux

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// socketEdgesPy makes raw socket and socketpair calls with the argument patterns the filter's
// socket blocks look at: protocol and family with high bits set (the kernel takes ints, so
// it sees the low half), SOCK_CLOEXEC in the type, and AF_UNIX datagram pairs.
const socketEdgesPy = `import ctypes, errno, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
arm = platform.machine() == "aarch64"
SOCKET, SOCKETPAIR = (198, 199) if arm else (41, 53)
pair = (ctypes.c_int * 2)()
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno() if r < 0 else 0
    print(name, errno.errorcode.get(e, str(e)) if e else "OK", flush=True)
RAWX, DGRAMX = 3 | 0o2000000, 2 | 0o2000000
call("netlink-route-high", SOCKET, 16, RAWX, 1 << 32 | 0)
call("netlink-connector-high", SOCKET, 16, RAWX, 1 << 32 | 11)
call("netlink-xfrm", SOCKET, 16, RAWX, 6)
call("netlink-family-high", SOCKET, 1 << 32 | 16, RAWX, 0)
call("unix-stream", SOCKET, 1, 1, 0)
call("pair-unix-dgram", SOCKETPAIR, 1, DGRAMX, 0, ctypes.addressof(pair))
call("pair-unix-raw", SOCKETPAIR, 1, 3, 0, ctypes.addressof(pair))
call("pair-unix-stream", SOCKETPAIR, 1, 1 | 0o2000000, 0, ctypes.addressof(pair))
call("pair-tipc", SOCKETPAIR, 30, 5, 0, ctypes.addressof(pair))
call("pair-netlink", SOCKETPAIR, 16, 3, 0, ctypes.addressof(pair))
`

// TestSocketEdgesSameWithAndWithoutRecording: a command sees the same answer to every
// socket edge case whether kernel refusals are recorded or not (and in trace mode), with
// unix sockets denied and allowed: the listener answers what the filter would (EACCES),
// and each recorded refusal names EACCES.
func TestSocketEdgesSameWithAndWithoutRecording(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported(), "no seccomp filter for "+runtime.GOARCH)
	requireNotify(t)
	want := map[bool]map[string]string{
		false: { // unix sockets denied (the default)
			"netlink-route-high": "OK", "netlink-connector-high": "EACCES", "netlink-xfrm": "EACCES",
			"netlink-family-high": "OK", "unix-stream": "EACCES", "pair-unix-dgram": "EACCES",
			"pair-unix-raw": "EACCES", "pair-unix-stream": "OK", "pair-tipc": "EACCES", "pair-netlink": "ENOTSUP",
		},
		true: { // unix sockets allowed
			"netlink-route-high": "OK", "netlink-connector-high": "EACCES", "netlink-xfrm": "EACCES",
			"netlink-family-high": "OK", "unix-stream": "OK", "pair-unix-dgram": "OK",
			"pair-unix-raw": "OK", "pair-unix-stream": "OK", "pair-tipc": "EACCES", "pair-netlink": "ENOTSUP",
		},
	}
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			for _, unixOK := range []bool{false, true} {
				for _, mode := range []string{"plain", "record", "trace"} {
					var got denials
					spec := e.spec(`exec `+python+` -c "$1"`, "sh", socketEdgesPy)
					spec.UnixSockets = unixOK
					if mode != "plain" {
						spec.KernelDenials = got.add
					}
					spec.Trace = mode == "trace"
					res, out, errOut := run(t, sb, spec)
					require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
					seen := map[string]string{}
					for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
						name, result, _ := strings.Cut(line, " ")
						seen[name] = result
					}
					assert.Equal(t, want[unixOK], seen, "unix sockets allowed %v, %s", unixOK, mode)
					for _, d := range got.list() {
						if d.Syscall == "socket" || d.Syscall == "socketpair" {
							assert.Equal(t, "EACCES", d.Errno, "%s: %+v", mode, d)
						}
					}
					if mode != "plain" {
						n := 0
						for _, d := range got.list() {
							if d.Syscall == "socket" || d.Syscall == "socketpair" {
								n++
							}
						}
						assert.GreaterOrEqual(t, n, 2, "%s: the connector and TIPC refusals were recorded: %+v", mode, got.list())
					}
				}
			}
		})
	}
}
