// SPDX-License-Identifier: MIT

package kernel

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestFilterAssembles(t *testing.T) {
	testutil.SkipUnlessSupported(t, SeccompSupported(), "no filter for this architecture")
	for _, f := range []Filter{{}, {DenyUnix: true}, {GateClone3: true}, {DenyUnix: true, GateClone3: true}} {
		prog, err := buildFilter(f)
		require.NoError(t, err, "%+v", f)
		assert.Less(t, len(prog), unix.BPF_MAXINSNS)
	}
}

func TestDeniedSyscallsTable(t *testing.T) {
	testutil.SkipUnlessSupported(t, SeccompSupported(), "no filter for this architecture")
	rows := map[string]DeniedSyscall{}
	for _, d := range DeniedSyscalls(Filter{}) {
		assert.NotEmpty(t, d.Why, d.Name)
		assert.NotEmpty(t, d.When, d.Name)
		rows[d.Name] = d
	}
	assert.Equal(t, "domain is none of AF_INET, AF_INET6, AF_NETLINK, AF_UNIX, or is AF_NETLINK and protocol is none of NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_NETFILTER, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC", rows["socket"].When, "a family allow-list, unix sockets refused only when DenyUnix, netlink by protocol")
	assert.Equal(t, "domain is none of AF_INET, AF_INET6, AF_NETLINK, AF_UNIX", rows["socketpair"].When, "pairs of the families socket refuses, every unix pair allowed")
	for _, name := range []string{"kcmp", "fanotify_init", "io_setup"} {
		assert.Equal(t, "EPERM", rows[name].Errno, name)
	}
	assert.Equal(t, "ENOSYS", rows["clone3"].Errno)
	assert.Equal(t, "EPERM", rows["io_uring_setup"].Errno)
	assert.Equal(t, "always", rows["keyctl"].When)
	assert.Contains(t, rows["clone"].When, "CLONE_NEW")
	withUnix := DeniedSyscalls(Filter{DenyUnix: true})
	assert.Equal(t, "EACCES", withUnix[0].Errno)
	assert.Equal(t, "domain is none of AF_INET, AF_INET6, AF_NETLINK, or is AF_NETLINK and protocol is none of NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_NETFILTER, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC", withUnix[0].When)
	assert.Equal(t, "socketpair", withUnix[1].Name)
	assert.Equal(t, "EACCES", withUnix[1].Errno)
	assert.Equal(t, "domain is none of AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, or is AF_UNIX and type is neither SOCK_STREAM nor SOCK_SEQPACKET", withUnix[1].When)
}

// gateHelperEnv makes the test binary the gate's answering process (the host's watchdog
// plays that part in fledge): listener on fd 3, the launching tid in the variable.
const gateHelperEnv = "FLEDGE_KERNEL_GATE_HELPER"

func TestMain(m *testing.M) {
	if v := os.Getenv(gateHelperEnv); v != "" {
		tid, _ := strconv.Atoi(v)
		if err := AnswerClone3(3, tid, 30*time.Second); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The gate lets the installing thread's own clone3 through (here Go's ForkExec uses clone3
// because of CLONE_NEWTIME, as it does for CLONE_INTO_CGROUP) while the child, under the
// same filter, gets ENOSYS for clone3 once the listener is closed, and fork still works.
func TestClone3GateLetsOnlyTheLauncherThrough(t *testing.T) {
	testutil.SkipUnlessSupported(t, SeccompSupported(), "no filter for this architecture")
	testutil.SkipUnlessSupported(t, os.Geteuid() == 0, "CLONE_NEWTIME needs root")
	_, err := os.Stat("/proc/self/ns/time")
	testutil.SkipUnlessSupported(t, err == nil, "no time namespaces")
	_, err = os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3")
	self, err := os.Executable()
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	py := `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.stdin.read()  # wait until every copy of the listener is closed
buf = ctypes.create_string_buffer(88)
r = libc.syscall(ctypes.c_long(435), ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_long(88))
print("clone3", os.strerror(ctypes.get_errno()) if r < 0 else "OK")
pid = os.fork()
if pid == 0: os._exit(3)
print("fork", os.WEXITSTATUS(os.waitpid(pid, 0)[1]))`
	inR, inW, err := os.Pipe()
	require.NoError(t, err)

	type installed struct{ listener, tid int }
	ready := make(chan installed, 1)
	answering := make(chan error, 1)
	var pid int
	var launchErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		onThrowawayThread(t, func() {
			if launchErr = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); launchErr != nil {
				ready <- installed{-1, 0}
				return
			}
			listener, err := InstallGatedFilter(Filter{})
			ready <- installed{listener, unix.Gettid()}
			if launchErr = err; err != nil {
				return
			}
			if launchErr = <-answering; launchErr != nil {
				return
			}
			unix.Close(listener) // the answering process holds the only other copy
			pid, launchErr = syscall.ForkExec("/usr/bin/python3", []string{"python3", "-c", py}, &syscall.ProcAttr{
				Files: []uintptr{inR.Fd(), w.Fd(), w.Fd()},
				Sys:   &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWTIME},
			})
		})
	}()
	in := <-ready
	var helper *os.Process
	if in.listener >= 0 {
		// Started from this (unfiltered) goroutine's thread, not the filtered one.
		// A dup of its own: the launching thread closes the original.
		dup, err := unix.FcntlInt(uintptr(in.listener), unix.F_DUPFD_CLOEXEC, 0)
		require.NoError(t, err)
		lf := os.NewFile(uintptr(dup), "listener")
		helper, err = os.StartProcess(self, []string{self}, &os.ProcAttr{
			Env:   append(os.Environ(), gateHelperEnv+"="+strconv.Itoa(in.tid)),
			Files: []*os.File{nil, os.Stderr, os.Stderr, lf},
		})
		lf.Close()
		answering <- err
	}
	<-done
	w.Close()
	inR.Close()
	require.NoError(t, launchErr)
	st, err := helper.Wait()
	require.NoError(t, err)
	assert.True(t, st.Success(), "the answering process let the launch through: %v", st)
	inW.Close() // the child may now try clone3
	var ws unix.WaitStatus
	_, err = unix.Wait4(pid, &ws, 0, nil)
	require.NoError(t, err)
	out := make([]byte, 4096)
	n, _ := r.Read(out)
	assert.Equal(t, 0, ws.ExitStatus(), string(out[:n]))
	assert.Equal(t, "clone3 Function not implemented\nfork 3\n", string(out[:n]))
}
