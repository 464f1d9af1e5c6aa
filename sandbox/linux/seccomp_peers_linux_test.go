// SPDX-License-Identifier: MIT

package linux

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// peerGapsPy makes the calls Docker's default profile, firejail's default list or Codex's
// Linux sandbox refuse and a confined command could still make: socket families outside
// IPv4/IPv6/netlink/unix (module autoload and little-used protocol code any uid may
// reach), socketpair of those families, unprivileged fanotify (whose groups count against
// the caller's uid: uid 0 shares them with the host's root), kcmp, modify_ldt, ustat (the
// statistics of any mounted filesystem by device number, past the private view) and
// io_setup (its events come out of fs.aio-max-nr, one budget for the whole host). Each
// line is "name result"; result is OK or the errno's name. Arguments are ones that
// succeed, or fail for another reason, without the filter.
const peerGapsPy = `import ctypes, errno, os, platform, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
arm = platform.machine() == "aarch64"
def res(r):
    e = ctypes.get_errno() if r < 0 else 0
    return errno.errorcode.get(e, str(e)) if e else "OK"
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(name, res(r), flush=True)
    return r
buf = ctypes.create_string_buffer(4096)
p = ctypes.addressof(buf)
pair = (ctypes.c_int * 2)()
SOCKET, SOCKETPAIR = (198, 199) if arm else (41, 53)
for fam, name, typ in [(38, "alg", 5), (30, "tipc", 4), (21, "rds", 5), (17, "packet", 3), (44, "xdp", 3),
                       (15, "key", 3), (29, "can", 2), (31, "bluetooth", 1), (40, "vsock", 1), (45, "mctp", 2)]:
    call("socket-" + name, SOCKET, fam, typ, 0)
for fam, name, typ in [(30, "tipc", 5), (40, "vsock", 1), (38, "alg", 5)]:
    call("socketpair-" + name, SOCKETPAIR, fam, typ, 0, ctypes.addressof(pair))
call("fanotify_init", 262 if arm else 300, 0x200, os.O_RDONLY)  # FAN_CLASS_NOTIF|FAN_REPORT_FID
call("kcmp", 272 if arm else 312, os.getpid(), os.getpid(), 0, 0, 0)  # KCMP_FILE, fd 0 with itself
ctx = ctypes.c_ulong(0)
call("io_setup", 0 if arm else 206, 1, ctypes.addressof(ctx))
if not arm:
    call("modify_ldt", 154, 0, p, 16)  # read the LDT
    call("ustat", 136, os.stat("/").st_dev, p)
# Allowed neighbours: what programs use every day.
for fam, name in [(socket.AF_INET, "inet"), (socket.AF_INET6, "inet6")]:
    try:
        socket.socket(fam, socket.SOCK_STREAM | socket.SOCK_CLOEXEC).close(); print("ok-" + name, "OK")
    except OSError as err:
        print("ok-" + name, errno.errorcode.get(err.errno, "?") if err.errno != errno.EAFNOSUPPORT else "OK")
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close(); print("ok-netlink", "OK")
except OSError as err:
    print("ok-netlink", errno.errorcode.get(err.errno, "?"))
a, b = socket.socketpair(); a.close(); b.close(); print("ok-socketpair", "OK")
print("ok-getaddrinfo", "OK" if socket.getaddrinfo("localhost", 80, flags=socket.AI_ADDRCONFIG) else "FAIL")
`

// TestSeccompPeerGaps attacks what the peers' filters refuse and fledge's did not: from a
// real confined command, every call below is refused by the filter (EACCES for the socket
// rows, EPERM for the rest), whatever this kernel would have said, while IPv4/IPv6/netlink
// sockets, a unix stream pair and getaddrinfo still work. Each launch method is tried.
func TestSeccompPeerGaps(t *testing.T) {
	testutil.RequireContained(t)
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported(), "no seccomp filter for "+runtime.GOARCH)
	_, err := os.Stat(python)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+python)
	// Positive control: unconfined (fledge's own test process) the calls that need no
	// capability succeed here, so what the command sees below is the filter's answer.
	ctl, err := exec.Command(python, "-c", peerGapsPy).CombinedOutput()
	require.NoError(t, err, "%s", ctl)
	control := parseResults(string(ctl))
	t.Logf("unconfined: %v", control)
	for _, name := range []string{"fanotify_init", "kcmp", "io_setup"} {
		if slices.Equal(control[name], []string{"ENOSYS"}) {
			continue // built without it (CONFIG_FANOTIFY, CONFIG_KCMP, CONFIG_AIO)
		}
		assert.Equal(t, []string{"OK"}, control[name], "%s works unconfined", name)
	}
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			res, out, errOut := run(t, sb, e.spec(`exec `+python+` -c "$1"`, "sh", peerGapsPy))
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			got := parseResults(out)
			refused := 0
			for name, results := range got {
				want := "EPERM"
				switch {
				case strings.HasPrefix(name, "ok-"):
					want = "OK"
				case strings.HasPrefix(name, "socket"):
					want = "EACCES"
				}
				if want != "OK" {
					refused++
				}
				assert.Equal(t, []string{want}, results, "%s from a confined command", name)
			}
			assert.GreaterOrEqual(t, refused, 16, "every gap was tried:\n%s", out)
		})
	}
}

func parseResults(out string) map[string][]string {
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, result, _ := strings.Cut(line, " ")
		got[name] = append(got[name], result)
	}
	return got
}

// TestSocketFamiliesKeepToolsWorking: the family allow-list leaves what real programs use:
// curl fetching from a Python HTTP server on loopback (AF_INET), node's
// os.networkInterfaces and dns.lookup (getifaddrs and getaddrinfo, over netlink), and
// ip(8) listing addresses over rtnetlink. The run has the network (the host's namespace,
// where loopback is up).
func TestSocketFamiliesKeepToolsWorking(t *testing.T) {
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported(), "no seccomp filter for "+runtime.GOARCH)
	for _, tool := range []string{"curl", "node", "ip"} {
		_, err := exec.LookPath(tool)
		testutil.SkipUnlessSupported(t, err == nil, "needs "+tool)
	}
	_, err := os.Stat(python)
	testutil.SkipUnlessSupported(t, err == nil, "needs "+python)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close()) // free for the server inside
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "page.txt"), []byte("served from inside\n"), 0o644))
	script := `set -e
` + python + ` -m http.server --bind 127.0.0.1 ` + port + ` >/dev/null 2>&1 &
for i in $(seq 50); do curl -fsS http://127.0.0.1:` + port + `/page.txt 2>/dev/null && break; sleep 0.1; done
kill $!
node -e 'const os=require("os"), dns=require("dns"); console.log("lo", Object.keys(os.networkInterfaces()).includes("lo")); dns.lookup("localhost", {family: 4}, (err, a) => console.log("lookup", err ? err.code : a))'
ip -o addr show lo | grep -c 127.0.0.1`
	spec := e.spec(script)
	spec.Network = true
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, "served from inside\nlo true\nlookup 127.0.0.1\n1\n", out)
}

// cnProcListen subscribes to the kernel's process connector (NETLINK_CONNECTOR, CN_IDX_PROC)
// and prints, for secs seconds, every name a process takes with prctl(PR_SET_NAME) that
// starts with the prefix in argv[1]. It prints "socket: <errno name>" when the socket is
// refused, "send: ..." when the subscription is.
const cnProcListen = `
import socket, struct, os, sys, time, select, errno
try:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)
except OSError as e:
    print("socket:", errno.errorcode.get(e.errno)); sys.exit(0)
s.bind((0, 1))
op = struct.pack("=I", 1)
cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(op), 0) + op
try:
    s.send(struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, 0) + cn)
except OSError as e:
    print("send:", errno.errorcode.get(e.errno)); sys.exit(0)
print("listening", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    if not select.select([s], [], [], 0.1)[0]:
        continue
    data = s.recv(65536)
    if struct.unpack_from("=I", data, 36)[0] == 0x200:
        name = data[60:76].split(b"\0")[0].decode(errors="replace")
        if name.startswith(sys.argv[1]):
            print("SAW", name, flush=True)
`

// TestSeccompNetlinkConnectorRefused: a run granted the network shares fledge's network
// namespace, the host's initial one, where the kernel's process connector (cn_proc) tells
// any listener, whatever its uid and capabilities since Linux 6.6, every fork, exec, exit,
// uid change and name change of every process of the host: the pid namespace hides the
// host's processes from /proc, not from this. (It names, among others, every other run's
// launch thread, "fledge-" and the 32 random bits its Landlock denials are told apart by.)
// The attack: a command listens while the host renames a process of its own. The control:
// unconfined, the same listener sees the name.
func TestSeccompNetlinkConnectorRefused(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	name := "fledgecn" + randomID()[:6]
	rename := func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = exec.Command(python, "-c", `import ctypes,sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)`, name).Run()
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Control: unconfined, the listener sees the host's process take the name.
	cmd := exec.Command(python, "-c", cnProcListen, name, "1.5")
	stop := make(chan struct{})
	go rename(stop)
	out, err := cmd.CombinedOutput()
	close(stop)
	require.NoError(t, err, "%s", out)
	if strings.Contains(string(out), "send: ECONNREFUSED") || strings.Contains(string(out), "socket:") {
		t.Skipf("not supported, skipping: no process connector in this network namespace: %s", out)
	}
	if !strings.Contains(string(out), "SAW "+name) {
		t.Skipf("not supported, skipping: this kernel tells an unconfined root nothing: %s", out)
	}

	spec := e.spec(python+` -c "$1" "$2" "$3"`, "sh", cnProcListen, name, "1.5")
	spec.Network = true
	stop = make(chan struct{})
	go rename(stop)
	res, got, errOut := run(t, sb, spec)
	close(stop)
	require.Equal(t, 0, res.ExitCode, "%s%s", got, errOut)
	assert.NotContains(t, got, "SAW "+name, "a command sees the host's processes through the process connector")
	assert.Contains(t, got, "socket: EACCES", "the connector socket is refused by the filter")
}
