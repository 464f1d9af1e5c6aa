// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// netlinkHostInfo asks, over the netlink protocols a command may open, for what would
// tell it about the host's processes past its pid namespace: taskstats (generic netlink)
// for the pid in argv[1] (fledge's, a host pid the command's pid namespace does not hold)
// and as a listener of every task's exit on CPU 0, and the audit log's multicast group
// and status. It prints one line per request: "<name> ok" or "<name> <errno name>".
const netlinkHostInfo = `
import socket, struct, sys, errno
def nla(t, data):
    l = 4 + len(data)
    return struct.pack("=HH", l, t) + data + b"\0" * ((4 - l % 4) % 4)
def ask(s, typ, cmd, attrs, flags):
    p = struct.pack("=BBH", cmd, 1, 0) + attrs
    s.send(struct.pack("=IHHII", 16 + len(p), typ, flags, 1, 0) + p)
    r = s.recv(65536)
    if struct.unpack_from("=H", r, 4)[0] == 2:
        e = -struct.unpack_from("=i", r, 16)[0]
        return errno.errorcode.get(e, str(e)) if e else "ok"
    return "ok"
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)
s.bind((0, 0))
p = struct.pack("=BBH", 3, 1, 0) + nla(2, b"TASKSTATS\0")
s.send(struct.pack("=IHHII", 16 + len(p), 0x10, 1, 1, 0) + p)
r = s.recv(65536)
off, fam = 20, None
while off < len(r):
    l, t = struct.unpack_from("=HH", r, off)
    if t == 1:
        fam = struct.unpack_from("=H", r, off + 4)[0]
    off += (l + 3) & ~3
print("family", "ok" if fam else "none")
if fam:
    print("taskstats-pid", ask(s, fam, 1, nla(1, struct.pack("=I", int(sys.argv[1]))), 1))
    print("taskstats-listen", ask(s, fam, 1, nla(3, b"0\0"), 5))
a = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
try:
    a.bind((0, 1)); print("audit-multicast ok")
except OSError as e:
    print("audit-multicast", errno.errorcode.get(e.errno))
a = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
a.bind((0, 0))
a.send(struct.pack("=IHHII", 16, 1000, 5, 1, 0))
r = a.recv(65536)
e = -struct.unpack_from("=i", r, 16)[0] if struct.unpack_from("=H", r, 4)[0] == 2 else 0
print("audit-status", errno.errorcode.get(e, str(e)) if e else "ok")
`

// TestNetlinkHostProcessInfoRefused: of the netlink protocols a command may open, generic
// netlink reaches taskstats, which answers a query for a pid (looked up in the asker's
// pid namespace) and registers listeners of the statistics of every task of the host that
// exits (a run granted the network shares fledge's network namespace, whose generic
// netlink is the host's); the audit protocol reaches the audit log's multicast group. The
// kernel refuses all of them to a command: the taskstats query and listener need
// CAP_NET_ADMIN, the multicast read CAP_AUDIT_READ and the status CAP_AUDIT_CONTROL. The
// attack: a command granted the network asks for fledge's own pid (the host's, past its
// pid namespace), listens, and reads the audit log's group and status. The control:
// fledge itself (root with its capabilities) reads the pid's taskstats.
func TestNetlinkHostProcessInfoRefused(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported(), "no seccomp filter for "+runtime.GOARCH)
	_, err := os.Stat(python)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+python)
	host := strconv.Itoa(os.Getpid())
	ctl, err := exec.Command(python, "-c", netlinkHostInfo, host).CombinedOutput()
	require.NoError(t, err, "%s", ctl)
	require.Contains(t, string(ctl), "family ok\ntaskstats-pid ok\n", "control: fledge reads a pid's taskstats")
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	spec := e.spec(python+` -c "$0" "$1"`, netlinkHostInfo, host)
	spec.Network = true
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, "family ok\ntaskstats-pid EPERM\ntaskstats-listen EPERM\naudit-multicast EPERM\naudit-status EPERM\n", out)
}

// TestNetlinkToolsStillWork: the netlink protocol allow-list leaves what tools use in a
// run granted the network: ss(8) over sock_diag lists a listening socket the command made
// and names its process (-p), ip monitor subscribes to rtnetlink events (it runs until
// stopped), getent's getaddrinfo resolves localhost and Python's if_nameindex lists lo.
func TestNetlinkToolsStillWork(t *testing.T) {
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported(), "no seccomp filter for "+runtime.GOARCH)
	for _, tool := range []string{"ss", "ip", "getent", "timeout"} {
		_, err := exec.LookPath(tool)
		testutil.SkipUnlessSupported(t, err == nil, "needs "+tool)
	}
	_, err := os.Stat(python)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+python)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	spec := e.spec(python + ` -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open("port", "w").write(str(s.getsockname()[1])); time.sleep(5)' &
for i in $(seq 50); do [ -s port ] && break; sleep 0.1; done
ss -Htlnp "sport = :$(cat port)" | grep -c "LISTEN.*python3"
kill $!
timeout 0.5 ip monitor link; echo "monitor $?"
getent ahostsv4 localhost | grep -c 127.0.0.1 >/dev/null && echo resolved
` + python + ` -c 'import socket; print("lo" in [n for _, n in socket.if_nameindex()])'`)
	spec.Network = true
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, "1\nmonitor 124\nresolved\nTrue\n", out, "stderr:\n%s", errOut)
}
