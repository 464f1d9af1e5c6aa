// SPDX-License-Identifier: MIT

package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// syscallAttackPy tries every denied call (and a few allowed neighbours) through libc's
// syscall(2) with arguments that would succeed, or fail with a different errno, without
// the filter. It prints "name errno" per attempt.
const syscallAttackPy = `import ctypes, ctypes.util, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
arm = platform.machine() == "aarch64"
NR = dict(  # x86_64, aarch64
    io_uring_setup=(425, 425), io_uring_enter=(426, 426), io_uring_register=(427, 427),
    keyctl=(250, 219), add_key=(248, 217), request_key=(249, 218),
    unshare=(272, 97), setns=(308, 268), mount=(165, 40), umount2=(166, 39), pivot_root=(155, 41),
    clone=(56, 220), clone3=(435, 435), bpf=(321, 280), perf_event_open=(298, 241),
    userfaultfd=(323, 282), init_module=(175, 105), finit_module=(313, 273),
    delete_module=(176, 106), kexec_load=(246, 104), kexec_file_load=(320, 294),
    open_by_handle_at=(304, 265), process_vm_readv=(310, 270), process_vm_writev=(311, 271),
    ptrace=(101, 117), personality=(135, 92), swapon=(167, 224), swapoff=(168, 225),
    reboot=(169, 142), acct=(163, 89), quotactl=(179, 60), getpid=(39, 172),
)
def call(name, *args):
    nr = NR[name][1 if arm else 0]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno() if r < 0 else 0
    print(name, os.strerror(e) if e else "OK", flush=True)
    return r
buf = ctypes.create_string_buffer(256)
p = ctypes.addressof(buf)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x20000, 0x40000000
call("io_uring_setup", 4, p)
call("io_uring_enter", 0, 0, 0, 0, 0, 0)
call("io_uring_register", 0, 0, 0, 0)
call("keyctl", 1, 0, 0, 0, 0)  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
call("add_key", p, p, 0, 0, -2)
call("request_key", p, p, 0, -2)
call("unshare", CLONE_NEWUSER)
call("setns", 0, 0)
call("mount", p, p, p, 0, 0)
call("umount2", p, 0)
call("pivot_root", p, p)
call("bpf", 0, p, 48)
call("perf_event_open", p, 0, -1, -1, 0)
call("userfaultfd", 0)
call("init_module", p, 1, p)
call("finit_module", -1, p, 0)
call("delete_module", p, 0)
call("kexec_load", 0, 0, 0, 0)
call("kexec_file_load", -1, -1, 0, p, 0)
call("open_by_handle_at", -1, p, 0)
call("process_vm_readv", os.getppid(), p, 1, p, 1, 0)
call("process_vm_writev", os.getppid(), p, 1, p, 1, 0)
call("ptrace", 16, os.getppid(), 0, 0)      # PTRACE_ATTACH
call("ptrace", 0x4206, os.getppid(), 0, 0)  # PTRACE_SEIZE
call("personality", 0x0040000)              # ADDR_NO_RANDOMIZE
call("personality", 0x0400000)              # READ_IMPLIES_EXEC
call("swapon", p, 0)
call("swapoff", p)
call("reboot", 0, 0, 0, 0)
call("acct", p)
call("quotactl", 0, p, 0, p)
# clone with a namespace flag: EPERM; clone3 (any flags): ENOSYS.
call("clone", CLONE_NEWNS | 17, 0, 0, 0, 0)
call("clone3", p, 88)
# Allowed neighbours: a query of the personality, an ordinary syscall, a fork.
print("personality-query", "OK" if libc.syscall(ctypes.c_long(NR["personality"][1 if arm else 0]), ctypes.c_long(0xffffffff)) >= 0 else "FAIL")
call("getpid")
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork", "OK" if os.WEXITSTATUS(os.waitpid(pid, 0)[1]) == 7 else "FAIL")
`

// TestSeccompDenyList attacks the kernel surface the deny-list closes: every listed call
// from a real confined command fails with EPERM (clone3: ENOSYS), while ordinary calls, a
// personality query and fork still work. Each launch method is tried.
func TestSeccompDenyList(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3 for the syscall attempts")
	testutil.SkipUnlessSupported(t, kernel.SeccompSupported(), "no seccomp filter for "+runtime.GOARCH)
	want := map[string]string{"clone3": "Function not implemented"}
	for _, d := range kernel.DeniedSyscalls(kernel.Filter{}) {
		if _, ok := want[d.Name]; !ok {
			want[d.Name] = "Operation not permitted"
		}
	}
	for _, launch := range []string{LaunchThread, LaunchStub} {
		t.Run(launch, func(t *testing.T) {
			sb := newSandbox(t, Options{Launch: launch})
			e := newEnv(t)
			res, out, errOut := run(t, sb, e.spec(`exec /usr/bin/python3 -c "$1"`, "sh", syscallAttackPy))
			require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
			got := map[string][]string{}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				name, result, _ := strings.Cut(line, " ")
				got[name] = append(got[name], result)
			}
			tried := 0
			for name, results := range got {
				exp, denied := want[name]
				if !denied {
					continue
				}
				tried++
				for _, r := range results {
					assert.Equal(t, exp, r, "%s from a confined command", name)
				}
			}
			assert.GreaterOrEqual(t, tried, 31, "every listed call was attempted:\n%s", out)
			assert.Equal(t, []string{"OK"}, got["getpid"])
			assert.Equal(t, []string{"OK"}, got["personality-query"])
			assert.Equal(t, []string{"OK"}, got["fork"])
		})
	}
}

// TestDenyListKeepsToolsWorking: the deny-list must not break what commands do every day:
// git init/commit, python3 -m venv (ensurepip runs subprocesses) and a C toolchain build.
// (go build of a hello module works too but compiles the runtime into an empty cache for
// about a minute on a small CI machine, so it is not part of the suite.)
func TestDenyListKeepsToolsWorking(t *testing.T) {
	_, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	_, err = os.Stat("/usr/bin/python3")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/python3")
	_, err = os.Stat("/usr/bin/cc")
	testutil.SkipUnlessSupported(t, err == nil, "needs /usr/bin/cc")
	// One launch method: the filter is the same for both (TestSeccompDenyList runs each),
	// and venv's ensurepip is slow.
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "hello.c"),
		[]byte("#include <stdio.h>\nint main(void) { puts(\"hello from cc\"); return 0; }\n"), 0o644))
	script := `set -e
git init -q .
git -c user.name=t -c user.email=t@t.invalid commit -q --allow-empty -m first
git log --oneline | wc -l
python3 -m venv venv >/dev/null && ./venv/bin/python -c 'import sys; print("venv", sys.prefix != sys.base_prefix)'
cc -o hello hello.c && ./hello`
	spec := e.spec(script)
	spec.Limits.Timeout = 2 * time.Minute
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Equal(t, "1\nvenv True\nhello from cc\n", out)
}

// TestGoBuildInProject: `go build` of a module in the project works from a confined
// command (the toolchain forks compilers and the linker, uses threads, mmaps and pipes).
// The command gets the host's Go build cache read-write, already warm from building this
// test, so the runtime is not compiled again.
func TestGoBuildInProject(t *testing.T) {
	goBin, err := exec.LookPath("go")
	testutil.SkipUnlessSupported(t, err == nil, "needs the go toolchain")
	out, err := exec.Command(goBin, "env", "GOROOT", "GOCACHE").Output()
	require.NoError(t, err)
	env := strings.Fields(string(out))
	require.Len(t, env, 2)
	goroot, gocache := env[0], env[1]
	require.NoError(t, os.MkdirAll(gocache, 0o755))
	sb := newSandbox(t, Options{})
	requireView(t, sb)
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "main.go"),
		[]byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from go\") }\n"), 0o644))
	spec := e.spec(`set -e; go build -o hello . && ./hello`)
	spec.Env = sandbox.WithEnv(spec.Env, "PATH", goroot+"/bin:/usr/bin:/bin")
	spec.Env = append(spec.Env, "GOCACHE="+gocache, "GOTOOLCHAIN=local", "GOPATH="+e.project+"/gopath", "GOPROXY=off")
	spec.Access.ReadExec = append(spec.Access.ReadExec, goroot)
	spec.Access.ReadWrite = append(spec.Access.ReadWrite, gocache)
	spec.Limits.Timeout = 3 * time.Minute
	res, stdout, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, "stdout:\n%s\nstderr:\n%s", stdout, errOut)
	assert.Equal(t, "hello from go\n", stdout)
	_, err = os.Stat(filepath.Join(e.project, "hello"))
	assert.NoError(t, err, "the binary is in the project on disk")
}
