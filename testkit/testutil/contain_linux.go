// SPDX-License-Identifier: MIT

package testutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// RunContained runs the tests of m inside the containment harness and returns the exit
// code for os.Exit. Use it as the last step of TestMain (after stub.MaybeRun):
//
//	os.Exit(testutil.RunContained(m))
//
// Stages: the outer process creates the cgroups and starts itself again in new PID and
// mount namespaces; that copy (pid 1: "init") remounts /proc, starts the real test run
// (pid 2) and reaps every orphan; when the test run exits, init kills whatever is left in
// the namespace. When containment is impossible the tests run uncontained (attack tests
// skip) or, under FLEDGE_REQUIRE_SANDBOX=1, the run fails.
func RunContained(m *testing.M) int {
	switch os.Getenv(containStageEnv) {
	case "test":
		return m.Run()
	case "init":
		return containInit()
	}
	code, err := containOuter()
	if err == nil {
		return code
	}
	if os.Getenv(RequireSandboxEnv) == "1" {
		fmt.Fprintf(os.Stderr, "%s=1 but the containment harness is unavailable: %v\n", RequireSandboxEnv, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "containment harness unavailable (%v); attack tests will skip\n", err)
	return m.Run()
}

// containGroup is one cgroup the harness created.
type containGroup struct{ dir string }

func containCgroups() ([]containGroup, *os.File, error) {
	id := fmt.Sprintf("fledge-contain-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	own, ownUnified, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return nil, nil, err
	}
	var groups []containGroup
	fail := func(err error) ([]containGroup, *os.File, error) {
		for _, g := range groups {
			_ = os.Remove(g.dir)
		}
		return nil, nil, err
	}
	mk := func(dir string, files map[string]string) error {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		groups = append(groups, containGroup{dir})
		for name, val := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(val), 0); err != nil {
				return fmt.Errorf("%s/%s: %w", dir, name, err)
			}
		}
		return nil
	}
	switch cgroups.Mode() {
	case cgroups.Unified:
		parent := filepath.Join("/sys/fs/cgroup", ownUnified)
		// Needs memory and pids enabled for children, which the "no internal processes"
		// rule may refuse; then containment is unavailable.
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids +memory"), 0); err != nil {
			return fail(fmt.Errorf("enable controllers in %s: %w", parent, err))
		}
		dir := filepath.Join(parent, id)
		if err := mk(dir, map[string]string{
			"pids.max":   strconv.Itoa(ContainPidsMax),
			"memory.max": strconv.FormatInt(ContainMemoryMax, 10),
		}); err != nil {
			return fail(err)
		}
		fd, err := os.Open(dir)
		if err != nil {
			return fail(err)
		}
		return groups, fd, nil
	case cgroups.Hybrid, cgroups.Legacy:
		for ctl, files := range map[string]map[string]string{
			"pids":   {"pids.max": strconv.Itoa(ContainPidsMax)},
			"memory": {"memory.limit_in_bytes": strconv.FormatInt(ContainMemoryMax, 10)},
		} {
			p, ok := own[ctl]
			if !ok {
				return fail(fmt.Errorf("no v1 %s hierarchy", ctl))
			}
			if err := mk(filepath.Join("/sys/fs/cgroup", ctl, p, id), files); err != nil {
				return fail(err)
			}
		}
		return groups, nil, nil
	}
	return fail(errors.New("no cgroup hierarchy"))
}

func containOuter() (int, error) {
	if os.Geteuid() != 0 {
		return 0, errors.New("needs root for CLONE_NEWPID and cgroups")
	}
	groups, cgfd, err := containCgroups()
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, g := range groups {
			killGroup(g.dir)
			_ = unix.Rmdir(g.dir)
		}
	}()
	if cgfd != nil {
		defer cgfd.Close()
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer goW.Close()
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	sys := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	if cgfd != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, int(cgfd.Fd())
	}
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr, goR}
	if as := startAuditService(); as != nil { // contain_audit_linux.go: init's fd 4
		defer as.close()
		files = append(files, as.theirs)
	}
	proc, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Files: files,
		Env:   stageEnv("init"),
		Sys:   sys,
	})
	goR.Close()
	if err != nil {
		return 0, fmt.Errorf("start contained test binary: %w", err)
	}
	// v1 groups are joined from here before init may proceed: it blocks reading goR.
	if cgfd == nil {
		for _, g := range groups {
			if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(proc.Pid)), 0); err != nil {
				_ = proc.Kill()
				_, _ = proc.Wait()
				return 0, fmt.Errorf("join %s: %w", g.dir, err)
			}
		}
	}
	goW.Close()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = proc.Signal(s)
		}
	}()
	st, err := proc.Wait()
	if err != nil {
		return 1, nil
	}
	return exitCode(st.Sys().(syscall.WaitStatus)), nil
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// killGroup kills whatever is still in a harness cgroup (nothing, normally: init kills its
// namespace) so it can be removed.
func killGroup(dir string) {
	for i := 0; i < 100; i++ {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			return
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// containInit is pid 1 of the harness namespace.
// containFirstPid is where the contained test's pids start (pid_max is 32768 at least).
const containFirstPid = 20000

func containInit() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "containment init:", err)
		return 1
	}
	goPipe := os.NewFile(3, "contain-go")
	_, _ = io.Copy(io.Discard, goPipe) // wait until the outer process placed us in the cgroups
	goPipe.Close()
	if os.Getpid() != 1 {
		return fail(fmt.Errorf("not pid 1 of a new pid namespace (pid %d)", os.Getpid()))
	}
	// A private /proc for this namespace: tests scanning /proc then see exactly the
	// processes that could have escaped a sandbox run.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("make / private: %w", err))
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail(fmt.Errorf("mount /proc: %w", err))
	}
	// The test's pids start high: a sandbox's own pid namespace numbers its processes from
	// 1, and a test handing a sandboxed attacker "the host's pid" must not have it name one
	// of the attacker's own processes there by coincidence (it would kill itself).
	if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(containFirstPid)), 0); err != nil {
		return fail(fmt.Errorf("ns_last_pid: %w", err))
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	env := stageEnv("test")
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	// fd 4 is the outer process's audit switch when it is a seqpacket socket (and not,
	// say, the runtime's epoll fd because the outer process had none to give).
	if typ, err := unix.GetsockoptInt(4, unix.SOL_SOCKET, unix.SO_TYPE); err == nil && typ == unix.SOCK_SEQPACKET {
		files = append(files, os.NewFile(4, "contain-audit"))
		env = append(env, containAuditEnv+"=3")
	}
	proc, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Files: files,
		Env:   env,
	})
	if err != nil {
		return fail(err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			_ = proc.Signal(s)
		}
	}()
	code := -1
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD: everything reaped
			break
		}
		if pid == proc.Pid {
			code = exitCode(ws)
			// The test run is over: nothing it started may linger.
			_ = syscall.Kill(-1, syscall.SIGKILL)
		}
	}
	if code < 0 {
		return fail(errors.New("lost the test process"))
	}
	return code
}

// stageEnv is our environment with the stage variable replaced (Getenv returns the first
// of duplicate keys, so appending is not enough).
func stageEnv(stage string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, containStageEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, containStageEnv+"="+stage)
}
