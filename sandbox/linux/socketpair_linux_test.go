// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// socketpairClient tries every way a socketpair(AF_UNIX) end could reach a pathname socket
// given on the command line. Each line it prints is one outcome; REACHED marks a datagram
// that left for the host socket.
const socketpairClient = `import socket, sys
S = socket
for path in sys.argv[1:]:
    for name, typ in (("DGRAM", S.SOCK_DGRAM), ("DGRAM|NONBLOCK", S.SOCK_DGRAM | S.SOCK_NONBLOCK), ("RAW", S.SOCK_RAW)):
        try:
            a, b = S.socketpair(S.AF_UNIX, typ)
        except OSError as e:
            print("pair", name, "refused", e.strerror)
            continue
        try:
            a.sendto(b"SENDTO " + name.encode(), path); print("REACHED sendto", name, path)
        except OSError as e:
            print("sendto", name, "failed", e.strerror)
        try:
            a.connect(path); a.send(b"CONNECT " + name.encode()); print("REACHED connect", name, path)
        except OSError as e:
            print("connect", name, "failed", e.strerror)
    # Connected stream and seqpacket pairs stay allowed: check they cannot be turned
    # toward another address (a listener of their own type, path-stream and
    # path-seqpacket), before and after their peer is gone.
    for name, typ in (("STREAM", S.SOCK_STREAM), ("SEQPACKET", S.SOCK_SEQPACKET)):
        listener = path + "-" + name.lower()
        a, b = S.socketpair(S.AF_UNIX, typ)
        try:
            a.sendto(b"SENDTO " + name.encode(), listener)
            b.settimeout(1)
            print("sendto", name, "went to the peer:", b.recv(64))
        except OSError as e:
            print("sendto", name, "failed", e.strerror)
        for when in ("open", "closed"):
            if when == "closed":
                b.close()
            try:
                a.connect(listener); print("REACHED connect", name, when, listener)
            except OSError as e:
                print("connect", name, when, "failed", e.strerror)
print("DONE")
`

// TestSocketpairDatagramRefused is the socketpair attack: socket(AF_UNIX) is
// refused, but a socketpair(AF_UNIX, SOCK_DGRAM) end can sendto or connect any pathname
// datagram socket the command can see. The host binds datagram sockets in the project
// (writable to the command) and in a plugin data dir; a confined command and a confined
// plugin process try to reach both. Nothing may arrive; unconfined, the same client
// delivers (positive control).
func TestSocketpairDatagramRefused(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the socket client")
	e := newEnv(t)
	dataDir := filepath.Join(filepath.Dir(e.project), "data")
	require.NoError(t, os.MkdirAll(dataDir, 0o755))
	paths := []string{filepath.Join(e.project, "host.sock"), filepath.Join(dataDir, "plugin.sock")}
	var listeners []*net.UnixConn
	var accepted atomic.Int32
	for _, p := range paths {
		l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		listeners = append(listeners, l)
		for _, typ := range []string{"stream", "seqpacket"} {
			network := map[string]string{"stream": "unix", "seqpacket": "unixpacket"}[typ]
			ln, err := net.Listen(network, p+"-"+typ)
			require.NoError(t, err)
			t.Cleanup(func() { ln.Close() })
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
		}
	}
	// received drains what reached the host sockets since the last call.
	received := func() []string {
		var got []string
		buf := make([]byte, 256)
		for _, l := range listeners {
			for {
				require.NoError(t, l.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
				n, err := l.Read(buf)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				require.NoError(t, err)
				got = append(got, string(buf[:n]))
			}
		}
		return got
	}

	// Positive control: unconfined, the client reaches both host sockets.
	out, err := exec.Command("/usr/bin/python3", append([]string{"-c", socketpairClient}, paths...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "REACHED sendto DGRAM")
	require.Contains(t, received(), "SENDTO DGRAM", "the attack works unconfined")

	for _, launch := range []string{LaunchThread, LaunchStub} {
		for _, kind := range []sandbox.Kind{sandbox.KindExec, sandbox.KindPlugin} {
			t.Run(launch+"/"+string(kind), func(t *testing.T) {
				sb := newSandbox(t, Options{Launch: launch})
				spec := e.spec(`exec /usr/bin/python3 -c "$@"`, append([]string{"sh", socketpairClient}, paths...)...)
				spec.Kind = kind
				spec.Access.ReadWrite = append(spec.Access.ReadWrite, dataDir)
				res, out, errOut := run(t, sb, spec)
				require.Equal(t, 0, res.ExitCode, errOut)
				require.Contains(t, out, "DONE")
				assert.NotContains(t, out, "REACHED")
				for _, name := range []string{"DGRAM", "DGRAM|NONBLOCK", "RAW"} {
					assert.Contains(t, out, "pair "+name+" refused Permission denied")
				}
				// The allowed pairs are still usable and still reach no one.
				assert.Contains(t, out, "sendto STREAM failed Transport endpoint is already connected")
				assert.Contains(t, out, "sendto SEQPACKET went to the peer: b'SENDTO SEQPACKET'")
				for _, name := range []string{"STREAM", "SEQPACKET"} {
					assert.Contains(t, out, "connect "+name+" open failed Transport endpoint is already connected")
					assert.Contains(t, out, "connect "+name+" closed failed Transport endpoint is already connected")
				}
				assert.Empty(t, received(), "nothing reached a host socket")
				assert.Zero(t, accepted.Load(), "no connection reached a host listener")
			})
		}
	}
}

// TestSocketpairUsersStillWork: the programs that use socketpair for their own children
// keep working confined: node's child_process with stdio pipes (libuv makes them with
// socketpair(AF_UNIX, SOCK_STREAM)) and Python's multiprocessing Process and Pipe (a
// socketpair), and a SOCK_SEQPACKET pair as Chromium makes. (multiprocessing.Pool and
// Queue need POSIX semaphores in /dev/shm, which the private view does not have, with or
// without this filter.)
func TestSocketpairUsersStillWork(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3")
	_, err = os.Stat("/usr/bin/node")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/node")
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	node := `const cp = require('child_process');
const c = cp.spawn('/bin/sh', ['-c', 'read x; echo got:$x'], {stdio: ['pipe', 'pipe', 'inherit']});
let out = '';
c.stdout.on('data', d => out += d);
c.on('close', code => { console.log('node child', code, out.trim()); });
c.stdin.end('hello\n');
console.log('sync', cp.execFileSync('/bin/echo', ['ok']).toString().trim());`
	res, out, errOut := run(t, sb, e.spec(`exec /usr/bin/node -e "$1"`, "sh", node))
	require.Equal(t, 0, res.ExitCode, errOut)
	assert.Contains(t, out, "sync ok")
	assert.Contains(t, out, "node child 0 got:hello")

	py := `import multiprocessing as mp, socket
def work(conn):
    conn.send(sum(x * x for x in range(conn.recv())))
if __name__ == "__main__":
    a, b = mp.Pipe()
    p = mp.Process(target=work, args=(b,)); p.start()
    a.send(10); print("process", a.recv()); p.join()
    a, b = mp.Pipe()
    a.send("x"); print("pipe", b.recv())
    s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s1.send(b"y"); print("seqpacket", s2.recv(1))`
	res, out, errOut = run(t, sb, e.spec(`exec /usr/bin/python3 -c "$1"`, "sh", py))
	require.Equal(t, 0, res.ExitCode, errOut)
	assert.Contains(t, out, "process 285")
	assert.Contains(t, out, "pipe x")
	assert.Contains(t, out, "seqpacket b'y'")
}

// TestNoInheritedSockets: an unconnected unix socket the host holds without close-on-exec
// (the way an inherited fd would be one) never reaches a command or a plugin process, on
// either launcher: every fd beyond stdio is closed before exec, so no socket is left to
// sendto or connect with.
func TestNoInheritedSockets(t *testing.T) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0) // no SOCK_CLOEXEC on purpose
	require.NoError(t, err)
	defer unix.Close(fd)
	e := newEnv(t)
	// Positive control: a child handed the fd sees a socket in the same listing.
	list := `for f in /proc/self/fd/*; do readlink "$f" || :; done`
	c := exec.Command("/bin/sh", "-c", list)
	dup, err := unix.Dup(fd)
	require.NoError(t, err)
	sock := os.NewFile(uintptr(dup), "sock")
	defer sock.Close()
	c.ExtraFiles = []*os.File{sock}
	out, err := c.Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "socket:")
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			res, out, errOut := run(t, sb, e.spec(list))
			require.Equal(t, 0, res.ExitCode, errOut)
			assert.NotContains(t, out, "socket:", "no socket fd in the command")
			assert.Contains(t, out, "pipe:", "the listing works (stdout is a pipe)")
		})
	}
}
