// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

func requirePidNS(t *testing.T, sb *Sandbox) {
	t.Helper()
	requireView(t, sb)
	testutil.SkipUnlessSupported(t, sb.pidns.available(), "no pid namespace (needs root and Linux 6.15)")
}

// TestPidNamespaceHidesHostProcesses: a command's /proc is its own session's. It must not
// see the test process (whose cmdline it could otherwise read), nor pid 1 of the host, and
// `kill` of the host's pid must fail; it sees itself, and a second run of the same plugin
// shares the namespace (the plugin and its commands), while another plugin's does not.
func TestPidNamespaceHidesHostProcesses(t *testing.T) {
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) { testPidNamespaceHides(t, launch) })
	}
}

func testPidNamespaceHides(t *testing.T, launch string) {
	sb := newSandbox(t, Options{Launch: launch})
	requirePidNS(t, sb)
	e := newEnv(t)
	// A process of the host with a secret on its command line, that the command must not
	// find (it is passed to the command through a file, not argv).
	marker := "fledge-host-secret-" + strconv.Itoa(os.Getpid())
	host := exec.Command("sh", "-c", "sleep 300", marker)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })
	require.NoError(t, os.WriteFile(e.project+"/marker", []byte(marker), 0o644))
	script := `
for d in /proc/[0-9]*; do
  echo "PID ${d#/proc/} $(cat "$d/comm" 2>/dev/null)"
done
tr '\0' ' ' < /proc/1/cmdline | grep -q __fledge_sandbox_pidns__ && echo PID1-IS-HOLDER
m=$(cat marker)
for d in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" in *"$m"*) echo "MARKER-SEEN";; esac
done
echo "SELF $$"
ls /proc/1/root/ >/dev/null 2>&1 && echo "HOLDER-ROOT-LISTED"
readlink /proc/1/root >/dev/null 2>&1 && echo "HOLDER-ROOT-READ"
cat /proc/1/environ >/dev/null 2>&1 && echo "HOLDER-ENVIRON-READ"
readlink /proc/1/fd/0 >/dev/null 2>&1 && echo "HOLDER-FD-READ"
ls /proc/1/cwd/ >/dev/null 2>&1 && echo "HOLDER-CWD-LISTED"
ps -e -o pid=,comm= >/dev/null 2>&1 && echo PS-OK
echo write > /proc/self/comm 2>/dev/null && echo PROC-WRITABLE
exit 0`
	spec := e.spec(script)
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.NotContains(t, out, "MARKER-SEEN")
	assert.NotContains(t, out, "PROC-WRITABLE")
	assert.NotContains(t, out, "HOLDER-", "the holder's /proc entries (its root is the host's /) are out of reach")
	assert.Contains(t, out, "PS-OK")
	assert.Contains(t, out, "PID1-IS-HOLDER", "pid 1 is the namespace's holder")
	var pids []int
	self := -1
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "PID "); ok {
			n, err := strconv.Atoi(strings.Fields(rest)[0])
			require.NoError(t, err)
			pids = append(pids, n)
		}
		if rest, ok := strings.CutPrefix(line, "SELF "); ok {
			self, _ = strconv.Atoi(rest)
		}
	}
	assert.Contains(t, pids, 1)
	assert.Contains(t, pids, self, "the command sees itself")
	assert.NotEqual(t, 1, self, "the command is not the namespace's init")
	// Only the holder, the shell and its command substitution: nothing of the host's
	// (this test alone runs the fledge test binary, sh and sleep there).
	assert.LessOrEqual(t, len(pids), 3, "processes seen: %v\n%s", pids, out)

	// A long-running command of the same plugin is visible to the next; another plugin's
	// is not.
	long := e.spec(`echo started; exec sleep 30`)
	started := &lineWaiter{want: "started", ch: make(chan struct{})}
	long.Stdout = started
	p, err := sb.Start(context.Background(), long)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	select {
	case <-started.ch:
	case <-time.After(20 * time.Second):
		t.Fatal("the long command did not start")
	}
	look := `cat /proc/[0-9]*/comm 2>/dev/null | grep -cx sleep`
	// "started" comes just before the exec of sleep: on a loaded machine the shell may not
	// have become sleep yet, so the same plugin's look waits for it a while.
	_, same, _ := run(t, sb, e.spec(`for i in $(seq 100); do n=$(`+look+`); [ "$n" -ge 1 ] && break; sleep 0.05; done; echo "$n"`))
	assert.Equal(t, "1", strings.TrimSpace(same), "the same plugin's sleep is visible")
	other := e.spec(look)
	other.Name = "another plugin"
	_, diff, _ := run(t, sb, other)
	assert.Equal(t, "0", strings.TrimSpace(diff), "another plugin's processes are not")
}

// TestPidNamespaceEndsWithSandbox: closing the sandbox ends its namespaces, and a process
// a command left behind (reparented to the holder) is gone with them.
func TestPidNamespaceEndsWithSandbox(t *testing.T) {
	sb, err := New(Options{Launch: LaunchThread})
	require.NoError(t, err)
	requirePidNS(t, sb)
	e := newEnv(t)
	pidFile := e.project + "/bg.pid"
	// setsid + double fork: an orphan outside the run's process group, left running.
	spec := e.spec(`setsid sh -c 'sleep 300 & echo $! > "$1"' sh "$1"; sleep 0.2`, pidFile)
	spec.Limits.Timeout = 20 * time.Second
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	require.NoError(t, sb.Close())
	// The pid the command saw is its namespace's; find the host's sleep by its holder.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := holderChildren(t)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of a closed sandbox's pid namespace still run: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// holderChildren lists processes whose parent is a pid-namespace holder of this test.
func holderChildren(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	holders := map[string]bool{}
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "__fledge_sandbox_pidns__") {
			holders[e.Name()] = true
		}
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && holders[f[1]] {
			out = append(out, fmt.Sprintf("%s (parent %s)", e.Name(), f[1]))
		}
	}
	if len(holders) > 0 && len(out) == 0 {
		// The holders themselves must be gone too.
		for h := range holders {
			out = append(out, "holder "+h)
		}
	}
	return out
}

// lineWaiter closes ch once want was written.
type lineWaiter struct {
	want string
	ch   chan struct{}
	buf  strings.Builder
	done bool
}

func (w *lineWaiter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		close(w.ch)
	}
	return len(b), nil
}

var _ = sandbox.KindExec

// TestPidNamespaceIdleHolderMakesRoom: at the bound, a namespace with no run in it is ended
// to make room for another plugin's; one with a run in it never is.
func TestPidNamespaceIdleHolderMakesRoom(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requirePidNS(t, sb)
	e := newEnv(t)
	long := e.spec(`echo started; exec sleep 30`)
	long.Name = "busy"
	started := &lineWaiter{want: "started", ch: make(chan struct{})}
	long.Stdout = started
	p, err := sb.Start(context.Background(), long)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	<-started.ch
	// Fill the bound with idle namespaces (their runs are over and cleaned up).
	for i := 0; i < maxPidNamespaces-1; i++ {
		spec := e.spec(`true`)
		spec.Name = fmt.Sprintf("idle-%d", i)
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	}
	sb.cleanups.Wait()
	sb.pidns.mu.Lock()
	require.Len(t, sb.pidns.holders, maxPidNamespaces)
	sb.pidns.mu.Unlock()
	spec := e.spec(`cat /proc/1/comm`)
	spec.Name = "newcomer"
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Empty(t, res.Mode.Degraded, "the newcomer got a namespace of its own")
	sb.pidns.mu.Lock()
	defer sb.pidns.mu.Unlock()
	assert.Len(t, sb.pidns.holders, maxPidNamespaces)
	assert.NotNil(t, sb.pidns.holders["busy"], "the namespace with a run in it stays")
	assert.NotNil(t, sb.pidns.holders["newcomer"])
	assert.Nil(t, sb.pidns.holders["idle-0"], "the longest idle one made room")
}

// TestPidNamespaceHolderShowsNoHostNetwork: /proc/<pid>/net shows the network namespace of
// that process, and any run of a plugin sees its namespace's pid 1, the holder. The attack:
// a command without network reads /proc/1/net (tcp, unix) looking for a TCP port the host
// listens on and an abstract unix socket the host bound; it must find neither. The control
// reads the host's own /proc/thread-self/net and finds both.
func TestPidNamespaceHolderShowsNoHostNetwork(t *testing.T) {
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			requirePidNS(t, sb)
			e := newEnv(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			port := fmt.Sprintf(":%04X ", ln.Addr().(*net.TCPAddr).Port)
			abstract := "fledge-host-" + randomID()
			ua, err := net.Listen("unix", "@"+abstract)
			require.NoError(t, err)
			defer ua.Close()

			var hostTCP, hostUnix []byte
			onDiscardedThread(func() {
				hostTCP, _ = os.ReadFile("/proc/thread-self/net/tcp")
				hostUnix, _ = os.ReadFile("/proc/thread-self/net/unix")
			})
			require.Contains(t, string(hostTCP), port, "control: the host's own table lists its port")
			require.Contains(t, string(hostUnix), "@"+abstract, "control: the host's own table lists its socket")

			spec := e.spec(`for d in /proc/[0-9]*; do cat "$d/net/tcp" "$d/net/unix" 2>/dev/null; done`)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			require.Contains(t, out, "Num       RefCount", "the command read some /proc/<pid>/net: %s", errOut)
			assert.NotContains(t, out, port, "a command sees the host's listening TCP port through /proc/1/net")
			assert.NotContains(t, out, "@"+abstract, "a command sees the host's abstract unix socket through /proc/1/net")
		})
	}
}

// TestPidNamespaceHolderShowsNoHostMounts: /proc/<pid>/mountinfo needs no ptrace rights,
// and any run of a plugin sees its namespace's pid 1, the holder. The attack: a command
// reads the mount tables of every process it can see (/proc/1 among them) looking for a
// mount the host made; it must not find it, nor any other of the host's mounts. The
// control: the host's own table lists the mount.
func TestPidNamespaceHolderShowsNoHostMounts(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "fledge-host-mount-"+randomID())
	require.NoError(t, os.Mkdir(marker, 0o700))
	// The contained test binary's mounts are private (testutil.RunContained): the host's
	// own never see this one.
	require.NoError(t, unix.Mount("tmpfs", marker, "tmpfs", 0, "size=4k"))
	t.Cleanup(func() { _ = unix.Unmount(marker, unix.MNT_DETACH) })
	host, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	require.Contains(t, string(host), marker, "control: the host's own table lists the mount")
	require.Contains(t, string(host), "/proc", "control: the host's own table lists /proc")

	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			requirePidNS(t, sb)
			e := newEnv(t)
			spec := e.spec(`echo "holder: $(tr '\0' ' ' < /proc/1/cmdline)"
for f in mountinfo mounts mountstats; do echo "== /proc/1/$f"; cat /proc/1/$f; done
for d in /proc/[0-9]*; do cat "$d/mountinfo" "$d/mounts" 2>/dev/null; done`)
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			require.Contains(t, out, stub.PidNSMarker, "pid 1 is the holder: %s", errOut)
			assert.NotContains(t, out, filepath.Base(marker), "a command sees a mount of the host's")
			holder := out[strings.Index(out, "== /proc/1/mountinfo"):strings.Index(out, "== /proc/1/mounts")]
			lines := strings.Split(strings.TrimSpace(holder), "\n")[1:]
			require.Len(t, lines, 1, "the holder's table has its empty root and nothing else: %q", holder)
			assert.Regexp(t, `^\d+ \d+ \S+ / / ro,.* - tmpfs fledge-pidns ro`, lines[0])
		})
	}
}

// TestPidNamespaceHolderStartsInUserNamespace: fledge as root of a user namespace (a
// rootless or user-namespaced container's root) gets a holder whose mount namespace belongs
// to that user namespace, and there the kernel makes a procfs only while a fully visible
// one is still in the mount namespace ("mount too revealing" otherwise). The holder must
// make its procfs before it leaves the host's mounts for its empty root, and still end with
// that root alone in its table. Started here as fledge starts it, but in a new user
// namespace (root mapped to itself, so it can still run this test binary: the kernel's rule
// is the same in every user namespace but the first).
func TestPidNamespaceHolderStartsInUserNamespace(t *testing.T) {
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0 && userNamespaces(), "needs root and user namespaces")
	exe, err := os.Executable()
	require.NoError(t, err)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	host, child := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "holder")
	defer host.Close()
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
	proc, err := os.StartProcess(exe, []string{exe, stub.PidNSMarker}, &os.ProcAttr{
		Files: []*os.File{child, nil, nil},
		Env:   []string{},
		Sys: &syscall.SysProcAttr{Setsid: true,
			Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWNS,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true,
			Credential: &syscall.Credential{Uid: 0, Gid: 0}},
	})
	child.Close()
	require.NoError(t, err)
	defer func() { host.Close(); _, _ = proc.Wait() }()
	h := &pidHolder{proc: proc, sock: int(host.Fd()), nsFD: -1, procFD: -1, pidFD: -1}
	require.NoError(t, h.receiveProc(), "the holder sends its procfs")
	defer unix.Close(h.procFD)
	var sfs unix.Statfs_t
	require.NoError(t, unix.Fstatfs(h.procFD, &sfs))
	assert.Equal(t, int64(unix.PROC_SUPER_MAGIC), int64(sfs.Type), "a procfs")
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", proc.Pid))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(table)), "\n")
	require.Len(t, lines, 1, "the holder's table has its empty root and nothing else: %s", table)
	assert.Regexp(t, `^\d+ \d+ \S+ / / ro,.* - tmpfs fledge-pidns ro`, lines[0])
}
