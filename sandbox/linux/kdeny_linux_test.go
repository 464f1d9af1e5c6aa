// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// denials collects what a run reports through Spec.KernelDenials.
type denials struct {
	mu  sync.Mutex
	all []sandbox.KernelDenial
}

func (d *denials) add(k sandbox.KernelDenial) { d.mu.Lock(); d.all = append(d.all, k); d.mu.Unlock() }

func (d *denials) list() []sandbox.KernelDenial {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]sandbox.KernelDenial(nil), d.all...)
}

// python is the system interpreter (not a pyenv shim, which reads the user's home).
const python = "/usr/bin/python3"

func requireNotify(t *testing.T) {
	t.Helper()
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported() && kernel.NotifySupported(), "seccomp user notification (Linux 5.5+)")
}

// Real programs call syscalls on the deny-list; each refusal is reported with the syscall,
// the errno and the condition, and the programs still see the errno they always did.
func TestKernelDeniedSyscalls(t *testing.T) {
	testutil.RequireContained(t)
	requireNotify(t)
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) { testKernelDeniedSyscalls(t, launch) })
	}
}

func testKernelDeniedSyscalls(t *testing.T, launch string) {
	sb := newSandbox(t, Options{Launch: launch})
	e := newEnv(t)
	for _, tc := range []struct {
		name, script, syscall, errno, out, unconfined string
		object                                        string // what the record names of the call
	}{
		{"unshare", "unshare --user true; echo rc=$?", "unshare", "EPERM", "rc=1", "rc=0", ""},
		{"io_uring_setup", python + ` -c 'import ctypes,os; r=ctypes.CDLL(None,use_errno=True).syscall(425,1,ctypes.create_string_buffer(120)); print("rc", r, os.strerror(ctypes.get_errno()))'`,
			"io_uring_setup", "EPERM", "rc -1 Operation not permitted", "Success", ""},
		// A socket family outside the allow-list is rare, so it is recorded (unlike
		// AF_UNIX, which glibc meets in ordinary runs). TIPC: any uid may create one
		// where the kernel has it (this one may answer EAFNOSUPPORT unconfined).
		{"socket AF_TIPC", python + ` -c 'import ctypes,os; r=ctypes.CDLL(None,use_errno=True).socket(30,4,0); print("rc", r, os.strerror(ctypes.get_errno()))'`,
			"socket", "EACCES", "rc -1 Permission denied", "rc ", "family=AF_TIPC type=SOCK_RDM protocol=0"},
		{"socket NETLINK_CONNECTOR", python + ` -c 'import ctypes,os; r=ctypes.CDLL(None,use_errno=True).socket(16,2|0x80000,11); print("rc", r, os.strerror(ctypes.get_errno()))'`,
			"socket", "EACCES", "rc -1 Permission denied", "rc ", "family=AF_NETLINK type=SOCK_DGRAM protocol=NETLINK_CONNECTOR"},
		{"fanotify_init", python + ` -c 'import ctypes,os; r=ctypes.CDLL(None,use_errno=True).fanotify_init(0x200,0); print("rc", r, os.strerror(ctypes.get_errno()))'`,
			"fanotify_init", "EPERM", "rc -1 Operation not permitted", "Success", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Positive control: unconfined, the same program gets what it asks for (where
			// this machine allows it at all), so the refusal below is the sandbox's.
			if out, err := exec.Command("/bin/sh", "-c", tc.script).Output(); err == nil && !strings.Contains(string(out), tc.unconfined) {
				t.Logf("unconfined, %s is refused here too: %s", tc.name, out)
			}
			var got denials
			spec := e.spec(tc.script)
			spec.KernelDenials = got.add
			res, out, errOut := run(t, sb, spec)
			assert.Equal(t, 0, res.ExitCode, errOut)
			assert.Contains(t, out, tc.out, "the program saw the errno the filter always gave")
			var hit *sandbox.KernelDenial
			for _, d := range got.list() {
				if d.Syscall == tc.syscall {
					hit = &d
				}
			}
			require.NotNil(t, hit, "no %s refusal reported: %+v", tc.syscall, got.list())
			assert.Equal(t, "syscall", hit.Kind)
			assert.Equal(t, tc.errno, hit.Errno)
			assert.NotZero(t, hit.Pid)
			assert.Equal(t, int64(1), hit.Count)
			assert.Equal(t, tc.object, hit.Object, "the record says what the call asked for")
		})
	}
}

// A loop of 100,000 refused calls is two reports (the first, and the true count at the
// end), not 100,000.
func TestKernelDeniedLoopBounded(t *testing.T) {
	testutil.RequireContained(t)
	requireNotify(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	var got denials
	spec := e.spec(python + ` -c 'import ctypes; s=ctypes.CDLL(None).syscall
for i in range(100000): s(425, 1, 0)
print("looped")'`)
	spec.KernelDenials = got.add
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	require.Contains(t, out, "looped")
	all := got.list()
	assert.LessOrEqual(t, len(all), 3, "bounded: %+v", all)
	var final *sandbox.KernelDenial
	for _, d := range all {
		if d.Syscall == "io_uring_setup" && d.Final {
			final = &d
		}
	}
	require.NotNil(t, final, "no final count: %+v", all)
	assert.Equal(t, int64(100000), final.Count)
}

// TestKernelDeniedSocketLoopBounded: refused socket families and netlink protocols are
// recorded (unlike AF_UNIX), and a loop over many of them is one kind for the rate limit:
// two records, the second with the true count, however many families the loop tries.
func TestKernelDeniedSocketLoopBounded(t *testing.T) {
	testutil.RequireContained(t)
	requireNotify(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	var got denials
	spec := e.spec(python + ` -c 'import ctypes; s=ctypes.CDLL(None).socket
fams=[f for f in range(1,46) if f not in (1,2,10,16)]
for i in range(10000): s(fams[i%len(fams)], 1, 0)
for i in range(1000): s(16, 2, 11)
print("looped")'`)
	spec.KernelDenials = got.add
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	require.Contains(t, out, "looped")
	all := got.list()
	assert.LessOrEqual(t, len(all), 3, "bounded: %+v", all)
	var final *sandbox.KernelDenial
	for _, d := range all {
		if d.Syscall == "socket" && d.Final {
			final = &d
		}
	}
	require.NotNil(t, final, "no final count: %+v", all)
	assert.Equal(t, int64(11000), final.Count)
	assert.Equal(t, "EACCES", final.Errno)
}

// Without a KernelDenials callback the filter answers in the kernel as before: the same
// errno, nothing reported, nothing waiting on the host.
func TestKernelDeniedOffByDefault(t *testing.T) {
	testutil.RequireContained(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	res, out, errOut := run(t, sb, e.spec("unshare --user true; echo rc=$?"))
	assert.Equal(t, 0, res.ExitCode, errOut)
	assert.Contains(t, out, "rc=1")
}

// Trace mode: a command reading the user's key (outside its grants, hidden by the view)
// is reported with the path it tried; what it may read is not.
func TestTraceReportsPathsOutsideGrants(t *testing.T) {
	testutil.RequireContained(t)
	requireNotify(t)
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) { testTraceReportsPaths(t, launch) })
	}
}

func testTraceReportsPaths(t *testing.T, launch string) {
	sb := newSandbox(t, Options{Launch: launch})
	e := newEnv(t)
	var got denials
	key := filepath.Join(e.home, ".ssh", "id_rsa")
	spec := e.spec("cat " + key + "; cat ./inside.txt; " + python + ` -c 'import socket; s=socket.socket(); s.settimeout(1); print("connect", s.connect_ex(("127.0.0.1", 9)))'; echo done`)
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "inside.txt"), []byte("fine"), 0o644))
	spec.KernelDenials = got.add
	spec.Trace = true
	res, out, errOut := run(t, sb, spec)
	assert.Equal(t, 0, res.ExitCode, errOut)
	assert.NotContains(t, out, "SECRET-KEY")
	assert.Contains(t, out, "fine")
	var paths []string
	for _, d := range got.list() {
		if d.Kind == "path" {
			paths = append(paths, d.Path+" "+d.Access)
		}
	}
	assert.Contains(t, paths, key+" read", "reported: %v", got.list())
	// The network is not granted: the destination is on record (the kernel refused it).
	var dests []string
	for _, d := range got.list() {
		if d.Kind == "network" {
			dests = append(dests, d.Syscall+" "+d.Address)
		}
	}
	assert.Contains(t, dests, "connect 127.0.0.1:9", "reported: %v", got.list())
	assert.Contains(t, out, "connect ")
	for _, p := range paths {
		assert.NotContains(t, p, "inside.txt")
	}
}

// A refused AF_UNIX socket (glibc asks nscd over one in ordinary runs) is answered in the
// filter by default, recorded only in trace mode; the program gets EACCES either way.
func TestKernelDeniedUnixSocketOnlyTraced(t *testing.T) {
	testutil.RequireContained(t)
	requireNotify(t)
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	for _, trace := range []bool{false, true} {
		var got denials
		spec := e.spec(python + ` -c 'import socket
try:
    socket.socket(socket.AF_UNIX)
    print("created")
except OSError as err:
    print("refused", err.errno)'`)
		spec.KernelDenials, spec.Trace = got.add, trace
		res, out, errOut := run(t, sb, spec)
		require.Equal(t, 0, res.ExitCode, errOut)
		assert.Contains(t, out, "refused 13", "EACCES, trace %v", trace)
		n := 0
		for _, d := range got.list() {
			if d.Syscall == "socket" {
				n++
			}
		}
		if trace {
			assert.Equal(t, 1, n, "traced: %v", got.list())
		} else {
			assert.Zero(t, n, "default: %v", got.list())
		}
	}
}
