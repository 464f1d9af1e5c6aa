// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// waitBound is a correctness bound (the process tree must end), not a speed assertion.
const waitBound = 60 * time.Second

// testLaunch is the launch method the suite runs with (TestStubLaunch re-runs it with
// the stub).
var testLaunch = LaunchThread

func newSandbox(t *testing.T, opts Options) *Sandbox {
	t.Helper()
	if opts.Launch == "" {
		opts.Launch = testLaunch
	}
	sb, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sb.Close(), "cgroup and temp dir cleanup") })
	return sb
}

// env is a fake user: $HOME with secrets, a fledge config dir, a project.
type env struct {
	home, config, project, outside string
	dir                            *os.File
}

func newEnv(t *testing.T) *env {
	t.Helper()
	root := t.TempDir()
	e := &env{
		home:    filepath.Join(root, "home"),
		config:  filepath.Join(root, "home", ".config", "fledge"),
		project: filepath.Join(root, "home", "project"),
		outside: filepath.Join(root, "outside"),
	}
	for _, d := range []string{e.config, e.project, e.outside, filepath.Join(e.home, ".ssh")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(e.home, ".ssh", "id_rsa"), []byte("SECRET-KEY"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(e.config, "plugins.toml"), []byte("[x]\n"), 0o600))
	d, err := os.Open(e.project)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	e.dir = d
	return e
}

func (e *env) spec(script string, args ...string) *sandbox.Spec {
	return &sandbox.Spec{
		Kind:    sandbox.KindExec,
		Name:    "test plugin/../x",
		Path:    "/bin/sh",
		Args:    append([]string{"sh", "-c", script}, args...),
		Dir:     e.dir,
		DirPath: e.project,
		Env:     []string{"PATH=/usr/bin:/bin", "HOME=" + e.home},
		Access: sandbox.Access{
			ReadWrite: []string{e.project},
			ReadExec:  SystemReadExec,
			Deny:      []string{e.config},
		},
		PrivateTmp: true,
		Limits:     sandbox.Limits{Timeout: 30 * time.Second, KillGrace: 500 * time.Millisecond},
	}
}

func run(t *testing.T, sb *Sandbox, spec *sandbox.Spec) (*sandbox.Result, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errb
	}
	p, err := sb.Start(context.Background(), spec)
	require.NoError(t, err)
	res := waitFor(t, p)
	return res, out.String(), errb.String()
}

func waitFor(t *testing.T, p sandbox.Process) *sandbox.Result {
	t.Helper()
	type rv struct {
		r   *sandbox.Result
		err error
	}
	ch := make(chan rv, 1)
	go func() { r, err := p.Wait(); ch <- rv{r, err} }()
	select {
	case v := <-ch:
		require.NoError(t, v.err)
		return v.r
	case <-time.After(waitBound):
		_ = p.Kill()
		t.Fatalf("Wait did not return within %v", waitBound)
		return nil
	}
}

func requireLandlock(t *testing.T, sb *Sandbox) {
	t.Helper()
	testutil.SkipUnlessSupported(t, sb.LandlockABI() > 0, "Landlock is not available")
}

func requireCgroup(t *testing.T, sb *Sandbox) {
	t.Helper()
	testutil.SkipUnlessSupported(t, sb.cg.writable(), "no writable cgroup")
}

func marker(t *testing.T) string {
	return fmt.Sprintf("fledge-marker-%d-%s", time.Now().UnixNano(), randomID())
}

// survivors lists live processes whose command line contains m.
func survivors(m string) []int { return testutil.ProcessesMatching(m) }

func TestExitCodesAndSignals(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	for _, tc := range []struct {
		script string
		code   int
		signal string
	}{
		{"true", 0, ""},
		{"exit 3", 3, ""},
		{"kill -TERM $$", 128 + 15, "SIGTERM"},
		{"kill -KILL $$", 128 + 9, "SIGKILL"},
	} {
		t.Run(tc.script, func(t *testing.T) {
			res, _, _ := run(t, sb, e.spec(tc.script))
			assert.Equal(t, tc.code, res.ExitCode)
			assert.Equal(t, tc.signal, res.Signal)
			assert.False(t, res.TimedOut)
		})
	}
}

func TestStdioAndEnv(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	spec := e.spec(`read line; echo "got $line"; echo err >&2; pwd; echo "tmp=$TMPDIR"; touch "$TMPDIR/x" && echo tmpok`)
	spec.Stdin = strings.NewReader("hello\n")
	res, out, errOut := run(t, sb, spec)
	require.Equal(t, 0, res.ExitCode, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	assert.Equal(t, "got hello", lines[0])
	assert.Equal(t, e.project, lines[1])
	tmp := strings.TrimPrefix(lines[2], "tmp=")
	assert.NotEqual(t, lines[2], tmp)
	assert.Equal(t, "tmpok", lines[3])
	assert.Equal(t, "err\n", errOut)
	// Removal runs after Wait, off the reply's path; Close waits for it.
	require.NoError(t, sb.Close())
	_, err := os.Stat(tmp)
	assert.True(t, errors.Is(err, os.ErrNotExist), "private tmp must be removed: %v", err)
}

func TestNoTerminalAndFds(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	// No controlling terminal and nothing beyond stdio (ls itself opens one for the dir);
	// the rlimits are the child's own from its first instruction.
	res, out, errOut := run(t, sb, e.spec(`(exec 3</dev/tty) 2>/dev/null && echo tty; ls /proc/self/fd | wc -l; ulimit -c; ulimit -n`))
	require.Equal(t, 0, res.ExitCode, errOut)
	assert.Equal(t, []string{"4", "0", strconv.Itoa(stub.DefaultNoFile)}, strings.Fields(out))
}

func TestFilesystemConfinement(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireLandlock(t, sb)
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		script string
		check  func(t *testing.T, out string)
	}{
		{"write outside", `echo pwned > "$1/evil"`, func(t *testing.T, _ string) {
			assert.NoFileExists(t, filepath.Join(e.outside, "evil"))
		}},
		{"read ssh key", `cat "$HOME/.ssh/id_rsa"`, func(t *testing.T, out string) {
			assert.NotContains(t, out, "SECRET")
		}},
		{"list config dir", `ls "$2"`, func(t *testing.T, out string) {
			assert.NotContains(t, out, "plugins.toml")
		}},
		{"append plugins.toml", `echo '[evil]' >> "$2/plugins.toml"`, func(t *testing.T, _ string) {
			b, err := os.ReadFile(filepath.Join(e.config, "plugins.toml"))
			require.NoError(t, err)
			assert.Equal(t, "[x]\n", string(b))
		}},
		{"replace plugins.toml", `mv "$2/plugins.toml" "$1/" ; rm "$2/plugins.toml"`, func(t *testing.T, _ string) {
			assert.FileExists(t, filepath.Join(e.config, "plugins.toml"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out, _ := run(t, sb, e.spec(tc.script, "sh", e.outside, e.config))
			assert.NotEqual(t, 0, res.ExitCode, "the attack must fail: %s", out)
			tc.check(t, out)
		})
	}
	t.Run("allowed project write and system read", func(t *testing.T) {
		res, out, errOut := run(t, sb, e.spec(`echo ok > ok.txt && head -c 5 /etc/passwd >/dev/null && cat ok.txt`))
		require.Equal(t, 0, res.ExitCode, errOut)
		assert.Equal(t, "ok\n", out)
		assert.Equal(t, "landlock", res.Mode.Confinement)
		assert.Equal(t, sb.LandlockABI(), res.Mode.LandlockABI)
	})
}

func TestInvalidSpec(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	for name, mutate := range map[string]func(s *sandbox.Spec){
		"allow covers deny":   func(s *sandbox.Spec) { s.Access.ReadOnly = []string{e.home} },
		"allow equals deny":   func(s *sandbox.Spec) { s.Access.ReadWrite = []string{e.config} },
		"relative allow path": func(s *sandbox.Spec) { s.Access.ReadExec = []string{"usr"} },
		"empty program":       func(s *sandbox.Spec) { s.Args = nil },
	} {
		t.Run(name, func(t *testing.T) {
			spec := e.spec("true")
			mutate(spec)
			_, err := sb.Start(context.Background(), spec)
			require.ErrorIs(t, err, sandbox.ErrInvalidSpec)
		})
	}
	t.Run("allow inside deny is a carve-out", func(t *testing.T) {
		spec := e.spec("true")
		spec.Access.ReadOnly = []string{filepath.Join(e.config, "plugins")}
		res, _, _ := run(t, sb, spec)
		assert.Equal(t, 0, res.ExitCode)
	})
}

func TestLaunchFailure(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	spec := e.spec("true")
	spec.Path = "/nonexistent/prog"
	_, err := sb.Start(context.Background(), spec)
	require.ErrorIs(t, err, sandbox.ErrLaunch)
	if sb.launch == LaunchStub {
		require.ErrorIs(t, err, stub.ErrStubFailed)
	}
	var se *stub.StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "exec", se.Step)
}

func TestStrictRefusesMissingFeatures(t *testing.T) {
	e := newEnv(t)
	for name, opts := range map[string]Options{
		"no landlock": {DisableLandlock: true},
		"no cgroups":  {DisableCgroups: true},
		// No view is built, whatever else the kernel offers (user namespaces included).
		"no view": {DisableView: true},
	} {
		t.Run(name, func(t *testing.T) {
			sb := newSandbox(t, opts)
			spec := e.spec("true")
			spec.Strict = true
			_, err := sb.Start(context.Background(), spec)
			require.ErrorIs(t, err, sandbox.ErrUnavailable)

			spec.Strict = false
			res, _, _ := run(t, sb, spec)
			assert.Equal(t, 0, res.ExitCode)
			assert.NotEmpty(t, res.Mode.Degraded)
		})
	}
}

func TestTimeoutKillsSetsidChild(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireCgroup(t, sb)
	e := newEnv(t)
	m := marker(t)
	spec := e.spec(`setsid sh -c 'trap "" TERM; sleep 1000' "$1" & trap "" TERM; sleep 1000`, m)
	spec.Limits.Timeout = 300 * time.Millisecond
	res, _, _ := run(t, sb, spec)
	assert.True(t, res.TimedOut)
	assert.Equal(t, 128+9, res.ExitCode, "TERM was ignored, so the main process died of KILL")
	assert.GreaterOrEqual(t, res.Killed, 2)
	assert.Empty(t, survivors(m))
}

func TestDaemonKilledAfterNormalExit(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireCgroup(t, sb)
	e := newEnv(t)
	m := marker(t)
	// Double fork + setsid, stdio detached: a classic daemon.
	res, _, _ := run(t, sb, e.spec(`(setsid sh -c 'sleep 1000' "$1" </dev/null >/dev/null 2>&1 &) ; sleep 0.2; exit 0`, m))
	assert.Equal(t, 0, res.ExitCode)
	assert.False(t, res.TimedOut)
	assert.GreaterOrEqual(t, res.Killed, 1)
	assert.Empty(t, survivors(m))
}

func TestBackgroundChildHoldingPipes(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireCgroup(t, sb)
	e := newEnv(t)
	m := marker(t)
	res, out, _ := run(t, sb, e.spec(`sh -c 'sleep 1000' "$1" & echo started`, m))
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "started\n", out)
	assert.Empty(t, survivors(m))
}

func TestCancel(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	spec := e.spec(`echo up; sleep 1000`)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	spec.Stdout = w
	p, err := sb.Start(ctx, spec)
	w.Close()
	require.NoError(t, err)
	line := make([]byte, 3)
	_, err = io.ReadFull(r, line)
	require.NoError(t, err)
	cancel()
	res := waitFor(t, p)
	assert.True(t, res.Cancelled)
	assert.False(t, res.TimedOut)
	assert.Equal(t, "SIGTERM", res.Signal)
}

type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n.Add(int64(len(b))); return len(b), nil }

func TestLargeOutput(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	var c countWriter
	spec := e.spec(`head -c 209715200 /dev/zero`)
	spec.Stdout = &c
	res, _, _ := run(t, sb, spec)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, int64(200<<20), c.n.Load())
}

func TestNetworkDenied(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		name string
		opts Options
		ok   func(sb *Sandbox) bool
	}{
		{"landlock tcp", Options{DisableNetNS: true}, func(sb *Sandbox) bool { return sb.abi >= 4 }},
		{"netns", Options{DisableLandlock: true}, func(sb *Sandbox) bool { return sb.netns }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newSandbox(t, tc.opts)
			testutil.SkipUnlessSupported(t, tc.ok(sb), tc.name+" network deny unavailable")
			e := newEnv(t)
			spec := &sandbox.Spec{
				Name: "net", Path: exe, Args: []string{exe, ln.Addr().String()},
				Env:    []string{helperEnv + "=connect"},
				Access: sandbox.Access{ReadExec: append([]string{filepath.Dir(exe)}, SystemReadExec...)},
				Limits: sandbox.Limits{Timeout: 30 * time.Second},
				Dir:    e.dir,
			}
			res, out, _ := run(t, sb, spec)
			assert.Equal(t, 3, res.ExitCode, out)
			assert.Contains(t, out, "connect failed")

			spec.Network = true
			spec.Stdout = nil
			res, out, _ = run(t, sb, spec)
			assert.Equal(t, 0, res.ExitCode, "control: with network allowed the connect works: %s", out)
		})
	}
}

func TestStubDirIdentityChecked(t *testing.T) {
	e := newEnv(t)
	other, err := os.Open(e.outside)
	require.NoError(t, err)
	defer other.Close()
	var st syscall.Stat_t
	require.NoError(t, syscall.Fstat(int(e.dir.Fd()), &st))
	stdio, err := stub.OpenStdio(nil, nil, nil)
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	l := &stub.Launch{
		StubPath: exe,
		Policy:   &stub.Policy{Path: "/bin/true", Args: []string{"true"}},
		Dir:      other,
		Stdin:    stdio.Files[0], Stdout: stdio.Files[1], Stderr: stdio.Files[2],
	}
	// The guarded identity is the project's, the handle is another directory's.
	l.Policy.DirDev, l.Policy.DirIno = uint64(st.Dev), uint64(st.Ino)
	p, err := l.Start()
	stdio.Abort()
	if p != nil {
		_, _ = p.Wait()
	}
	var se *stub.StepError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "fchdir", se.Step)
}

// TestStubLaunch runs the behavioural tests again through the re-exec stub, the launch
// path darwin and the fallback share and the one with no rlimit window.
func TestStubLaunch(t *testing.T) {
	testLaunch = LaunchStub
	defer func() { testLaunch = LaunchThread }()
	for name, f := range map[string]func(*testing.T){
		"ExitCodesAndSignals":   TestExitCodesAndSignals,
		"StdioAndEnv":           TestStdioAndEnv,
		"NoTerminalAndFds":      TestNoTerminalAndFds,
		"FilesystemConfinement": TestFilesystemConfinement,
		"LaunchFailure":         TestLaunchFailure,
		"TimeoutKillsSetsid":    TestTimeoutKillsSetsidChild,
		"DaemonKilled":          TestDaemonKilledAfterNormalExit,
		"NetworkDenied":         TestNetworkDenied,
		"ForkBomb":              TestForkBomb,
		"MemoryBomb":            TestMemoryBomb,
		"KillHostFromInside":    TestKillHostFromInside,
	} {
		t.Run(name, f)
	}
}

func TestSignalAndKill(t *testing.T) {
	sb := newSandbox(t, Options{})
	e := newEnv(t)
	start := func(script string) (sandbox.Process, *os.File) {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		spec := e.spec(script)
		spec.Stdout = w
		p, err := sb.Start(context.Background(), spec)
		w.Close()
		require.NoError(t, err)
		buf := make([]byte, 3)
		_, err = io.ReadFull(r, buf) // the script is running
		require.NoError(t, err)
		return p, r
	}
	t.Run("signal reaches the main process only", func(t *testing.T) {
		p, r := start(`trap 'echo term; exit 7' TERM; echo up; while :; do sleep 0.05; done`)
		defer r.Close()
		require.NoError(t, p.Signal(syscall.SIGTERM))
		res := waitFor(t, p)
		assert.Equal(t, 7, res.ExitCode)
		assert.False(t, res.TimedOut)
	})
	t.Run("kill ends the tree", func(t *testing.T) {
		m := marker(t)
		spec := "sh -c 'sleep 1000' " + m + " & echo up; sleep 1000"
		p, r := start(spec)
		defer r.Close()
		// "up" is printed once the background job is forked, not once it runs as the marked
		// sh: wait for that, so the tree holds its two processes when the kill lands (under
		// load CI once saw the kill count only one).
		deadline := time.Now().Add(5 * time.Second)
		for len(survivors(m)) == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		require.NotEmpty(t, survivors(m), "the background job never started")
		require.NoError(t, p.Kill())
		res := waitFor(t, p)
		assert.Equal(t, "SIGKILL", res.Signal)
		assert.GreaterOrEqual(t, res.Killed, 2)
		assert.Empty(t, survivors(m))
		assert.ErrorIs(t, p.Signal(syscall.SIGTERM), os.ErrProcessDone)
	})
}

// TestTimeoutTermCountsWhatItEnded: a tree that dies of the timeout's SIGTERM (nothing traps
// it) was ended by the sandbox, and the Result (and the audit record's procs_killed) counts
// every process the SIGTERM reached. The SIGTERM ends the main process at once, so the
// count must not be read before the signalled ones are noted: it read 0 for a fork bomb
// under load.
func TestTimeoutTermCountsWhatItEnded(t *testing.T) {
	sb := newSandbox(t, Options{})
	requireCgroup(t, sb)
	e := newEnv(t)
	const n = 40
	for i := range 8 {
		m := marker(t)
		spec := e.spec(fmt.Sprintf(`for i in $(seq %d); do sh -c 'sleep 1000' "$1" & done; echo up; sleep 1000`, n), m)
		spec.Limits.Timeout = 400 * time.Millisecond
		res, out, _ := run(t, sb, spec)
		require.Equal(t, "up\n", out)
		assert.True(t, res.TimedOut)
		assert.Equal(t, "SIGTERM", res.Signal, "run %d: the tree died of the SIGTERM", i)
		assert.GreaterOrEqual(t, res.Killed, n+1, "run %d: every process the SIGTERM ended is counted", i)
		assert.Empty(t, survivors(m))
	}
}
