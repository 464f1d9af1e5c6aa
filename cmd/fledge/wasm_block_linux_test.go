// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// wasmHangLimit only catches a run that never ends (the attack succeeding: before the fix
// only SIGKILL ended it); nothing here measures speed.
const wasmHangLimit = 30 * time.Second

// wasmEnv is a throwaway home with the wasm package's test guest "probe" installed as a WASM
// plugin with the project filesystem grant, and a project holding a FIFO (as a checkout
// can) beside a regular file; the plugin's data dir holds one too (as its exec can mkfifo).
type wasmEnv struct {
	fledge, home, proj, auditLog string
	env                          []string
}

func newWasmEnv(t *testing.T, config string) *wasmEnv {
	t.Helper()
	fledge, err := exec.LookPath("fledge") // testscript.Main put this test binary there as "fledge"
	require.NoError(t, err)
	root := t.TempDir()
	e := &wasmEnv{fledge: fledge, home: filepath.Join(root, "home"), proj: filepath.Join(root, "proj")}
	cfgDir := filepath.Join(e.home, ".config", "fledge")
	src := filepath.Join(root, "src")
	for _, d := range []string{cfgDir, e.proj, src} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte(config), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(e.proj, "fledge.toml"), []byte("[project]\nname = \"proj\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(e.proj, "marker.txt"), []byte("x"), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(e.proj, "fifo"), 0o644))

	build := exec.Command("go", "build", "-o", filepath.Join(src, "probe.wasm"), "../../sandbox/wasm/testdata/guests/probe")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the wasm guest: %s", out)
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(`[plugin]
name = "probe"
version = "1.0.0"
protocol = "fledge-v1"
runtime = "wasm"

[[commands]]
name = "probe"
binary = "probe.wasm"

[capabilities]
filesystem = "project"
`), 0o644))
	e.auditLog = filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl")
	e.env = []string{
		"HOME=" + e.home, "FLEDGE_CONFIG_DIR=" + cfgDir, "FLEDGE_AUDIT_LOG=" + e.auditLog,
		"XDG_CONFIG_HOME=", "XDG_STATE_HOME=", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
	}
	install := exec.Command(fledge, "--ni", "plugins", "install", src, "--yes")
	install.Env, install.Dir = e.env, e.proj
	out, err = install.CombinedOutput()
	require.NoError(t, err, "install: %s", out)
	data := filepath.Join(cfgDir, "plugins", "probe", "data")
	require.NoError(t, os.MkdirAll(data, 0o700))
	require.NoError(t, syscall.Mkfifo(filepath.Join(data, "fifo"), 0o644))
	return e
}

// wasmRun is one `fledge --ni probe ARGS` process.
type wasmRun struct {
	cmd            *exec.Cmd
	stdout, stderr *testutil.SyncBuffer
	done           chan struct{}
	err            error
	start          time.Time
}

func (e *wasmEnv) start(t *testing.T, args ...string) *wasmRun {
	t.Helper()
	r := &wasmRun{stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(e.fledge, append([]string{"--ni", "probe"}, args...)...)
	r.cmd.Env, r.cmd.Dir = e.env, e.proj
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	r.start = time.Now()
	require.NoError(t, r.cmd.Start())
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			// The attack worked: only SIGKILL ends fledge.
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *wasmRun) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(wasmHangLimit)
	for !strings.Contains(r.stdout.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never appeared; stdout:\n%s\nstderr:\n%s", s, r.stdout.String(), r.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exit waits (at most limit) for fledge to end and returns its exit status.
func (r *wasmRun) exit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(limit):
		t.Fatalf("fledge did not end within %v; stdout:\n%s\nstderr:\n%s", limit, r.stdout.String(), r.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, r.err)
	return 0
}

func (e *wasmEnv) lastExit(t *testing.T) *audit.Record {
	t.Helper()
	var last *audit.Record
	require.NoError(t, audit.Read(e.auditLog, func(r *audit.Record) error {
		if r.Event == audit.EventPluginExit {
			last = r
		}
		return nil
	}))
	require.NotNil(t, last, "no plugin_exit record")
	return last
}

// TestWasmFIFOOpenEndsAtTimeout: a WASM plugin opens FIFOs in its preopens, then spins. An
// open that reached open(2) as asked blocked inside fledge's process past the [wasm]
// timeout, SIGINT and SIGTERM. Each open is refused at once, and the run ends at its
// timeout, recorded as one.
func TestWasmFIFOOpenEndsAtTimeout(t *testing.T) {
	e := newWasmEnv(t, "[wasm]\ntimeout = \"3s\"\n")
	r := e.start(t, "fifo", "spin")
	code := r.exit(t, wasmHangLimit)
	elapsed := time.Since(r.start)
	t.Logf("fledge ended after %v with %d; stdout:\n%s\nstderr:\n%s", elapsed, code, r.stdout.String(), r.stderr.String())
	assert.NotEqual(t, 0, code)
	out := r.stdout.String()
	assert.Contains(t, out, `"read /project/fifo":"open /project/fifo: Permission denied"`)
	assert.Contains(t, out, `"write /plugin/fifo":"open /plugin/fifo: Permission denied"`)
	assert.Contains(t, out, `"read /project/marker.txt":"ok"`, "a regular file beside them opens")
	assert.Contains(t, out, "spinning")
	assert.Contains(t, r.stderr.String(), "ran longer than its 3s limit")
	// A hang guard with room for fledge's start on a loaded machine, not a speed test.
	assert.Less(t, elapsed, 3*time.Second+10*time.Second)
	assert.Equal(t, "timeout", e.lastExit(t).Reason)
}

// TestWasmSignalEndsBlockedRun: SIGINT or SIGTERM to `fledge run` ends a WASM plugin
// promptly with 130, wherever its module is: in a FIFO open (before the fix: blocked
// there for good), spinning in guest code, or asleep in a host call.
func TestWasmSignalEndsBlockedRun(t *testing.T) {
	e := newWasmEnv(t, "")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		for _, tc := range []struct {
			name, ready string
			args        []string
		}{
			{"fifo open then spin", "opening fifos", []string{"fifo", "spin"}},
			{"sleep in a host call", "sleeping", []string{"sleep"}},
		} {
			t.Run(sig.String()+"/"+tc.name, func(t *testing.T) {
				r := e.start(t, tc.args...)
				r.waitFor(t, tc.ready)
				// Into the open (or sleep) it just announced.
				time.Sleep(300 * time.Millisecond)
				require.NoError(t, r.cmd.Process.Signal(sig))
				sent := time.Now()
				code := r.exit(t, 3*time.Second)
				t.Logf("ended %v after the signal", time.Since(sent))
				assert.Equal(t, 130, code, "stdout:\n%s\nstderr:\n%s", r.stdout.String(), r.stderr.String())
				assert.Equal(t, "cancelled", e.lastExit(t).Reason)
			})
		}
	}
}
