// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Every way a run of fledge ends (its stdout's reader gone, SIGHUP from a closed terminal,
// SIGTERM, SIGINT) ends the plugin's session as Ctrl+C does: the plugin's whole tree is
// gone, plugin_exit is on record (the session shows as ended), the log verifies, and the
// run's temp dirs and cgroups are removed. These tests run the real CLI binary.

// endHangLimit only catches a hung run; the ladder's SIGTERM comes after 5 s.
const endHangLimit = 40 * time.Second

// spillPlugin is a fledge-v1 plugin that starts a child of its own (so the whole tree must
// end, not only its main process), then prints lines until it is stopped.
const spillPlugin = `#!/bin/bash
if [ "$1" = child ]; then while :; do sleep 1; done; fi
read -r INIT
bash "$0" child &
i=0
while :; do
  i=$((i+1))
  printf '{"type":"output","text":"line %d\\n"}\n' "$i"
  sleep 0.01
done
`

// oldSpillPlugin is the same as a legacy plugin: its stdout is fledge's own.
const oldSpillPlugin = `#!/bin/bash
if [ "$1" = child ]; then while :; do sleep 1; done; fi
bash "$0" child &
i=0
while :; do
  i=$((i+1))
  echo "line $i"
  sleep 0.01
done
`

// hangPlugin is a JSON-RPC 2.0 tool/hook plugin whose tool and hook start a child and then
// never answer (the install probe only initializes it and shuts it down).
const hangPlugin = `#!/usr/bin/python3
import json, os, subprocess, sys, time
if len(sys.argv) > 1 and sys.argv[1] == "child":
    while True:
        time.sleep(1)
def out(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
def hang():
    subprocess.Popen([sys.executable, os.path.abspath(sys.argv[0]), "child"])
    open(os.path.join(os.environ["HOME"], "ready"), "w").close()
    while True:
        time.sleep(1)
for line in sys.stdin:
    m = json.loads(line)
    meth, rid, r = m.get("method"), m.get("id"), None
    if meth == "initialize":
        r = {"name": "hang", "version": "1.0.0", "description": "hangs", "hooks": ["post_user_input"],
             "tools": [{"name": "wait", "description": "waits", "parameters": []}], "priority": 10}
    elif meth in ("tool/execute", "hook/post_user_input"):
        hang()
    elif meth == "shutdown":
        out({"jsonrpc": "2.0", "id": rid, "result": None})
        break
    if rid is not None:
        out({"jsonrpc": "2.0", "id": rid, "result": r})
`

// invPlugin is an invoke-v1 plugin: "count" streams chunks until it is stopped, "sleep"
// never answers; both start a child first.
const invPlugin = `#!/usr/bin/python3
import json, os, subprocess, sys, time
if len(sys.argv) > 1 and sys.argv[1] == "child":
    while True:
        time.sleep(1)
def send(iid, typ, resp):
    sys.stdout.write(json.dumps({"invoke_id": iid, "type": typ, "response": resp}) + "\n")
    sys.stdout.flush()
send("", "plugin_ready", {"info": "ready"})
for line in sys.stdin:
    req = json.loads(line)
    iid, action = req["invoke_id"], req["action"]
    subprocess.Popen([sys.executable, os.path.abspath(sys.argv[0]), "child"])
    open(os.path.join(os.environ.get("FLEDGE_DATA_DIR") or os.environ["HOME"], "ready"), "w").close()
    i = 0
    while True:
        if action == "count":
            send(iid, "plugin_response", "chunk %d" % i)
            i += 1
        time.sleep(0.01)
`

// endEnv is a throwaway home, work dir and TMPDIR for fledge, with plugins installed.
type endEnv struct {
	t        *testing.T
	fledge   string
	root     string // every plugin file lies beneath it: a process whose command line names it is the plugin's
	home     string
	work     string
	tmp      string // fledge's TMPDIR: the runs' temp dirs are made here
	auditLog string
	env      []string
	plugins  []string
	started  int // sessions that started a plugin, at the last check
}

func newEndEnv(t *testing.T) *endEnv {
	t.Helper()
	fledge, err := exec.LookPath("fledge") // testscript.Main put this test binary there as "fledge"
	require.NoError(t, err)
	root := t.TempDir()
	e := &endEnv{t: t, fledge: fledge, root: root, home: filepath.Join(root, "home"), work: filepath.Join(root, "work"), tmp: filepath.Join(root, "tmp")}
	cfgDir := filepath.Join(e.home, ".config", "fledge")
	for _, d := range []string{cfgDir, e.work, e.tmp} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	e.auditLog = filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl")
	e.env = []string{
		"HOME=" + e.home, "FLEDGE_CONFIG_DIR=" + cfgDir, "FLEDGE_AUDIT_LOG=" + e.auditLog,
		"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm-256color", "LANG=C.UTF-8", "NO_COLOR=1",
		"TMPDIR=" + e.tmp, "FLEDGE_NON_INTERACTIVE=1",
	}
	return e
}

// install installs a plugin of one command (name, running script) with protocol ("" for a
// legacy plugin).
func (e *endEnv) install(name, protocol, script string) {
	t := e.t
	t.Helper()
	src := filepath.Join(e.root, "src", name)
	require.NoError(t, os.MkdirAll(src, 0o700))
	proto := ""
	if protocol != "" {
		proto = "protocol = \"" + protocol + "\"\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte("[plugin]\nname = \""+name+"\"\nversion = \"1.0.0\"\n"+proto+
		"\n[[commands]]\nname = \""+name+"\"\nbinary = \""+name+".sh\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, name+".sh"), []byte(script), 0o755))
	args := []string{"--ni", "plugins", "install", src, "--yes"}
	if protocol == "fledge-v1" {
		// The plugin's output is the data under test; the project is not.
		args = append(args[:len(args)-1], "--grant", "")
	}
	out, err := e.command(args...).CombinedOutput()
	require.NoError(t, err, "install %s: %s", name, out)
	e.plugins = append(e.plugins, name)
}

func (e *endEnv) command(args ...string) *exec.Cmd {
	cmd := exec.Command(e.fledge, args...)
	cmd.Env, cmd.Dir = e.env, e.work
	return cmd
}

func (e *endEnv) dataDir(plugin string) string {
	return filepath.Join(e.home, ".config", "fledge", "plugins", plugin, "data")
}

// waitFile waits (bounded) for the plugin to say it reached the step under test.
func (e *endEnv) waitFile(path string, done <-chan struct{}, what func() string) {
	e.t.Helper()
	deadline := time.Now().Add(endHangLimit)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-done:
			e.t.Fatalf("fledge ended before %s appeared: %s", path, what())
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s never appeared: %s", path, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run is one fledge process under test, its stdout and stdin pipes held by the test.
type run struct {
	e      *endEnv
	cmd    *exec.Cmd
	stdin  *os.File // the write end of fledge's stdin (nil: /dev/null)
	stdout *os.File // the read end of fledge's stdout
	out    *bufio.Reader
	stderr *testutil.SyncBuffer
	done   chan struct{}
	err    error
}

func (e *endEnv) start(withStdin bool, args ...string) *run {
	t := e.t
	t.Helper()
	r := &run{e: e, cmd: e.command(args...), stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	r.stdout, r.out = outR, bufio.NewReader(outR)
	r.cmd.Stdout, r.cmd.Stderr = outW, r.stderr
	var inR *os.File
	if withStdin {
		inR, r.stdin, err = os.Pipe()
		require.NoError(t, err)
		r.cmd.Stdin = inR
	}
	require.NoError(t, r.cmd.Start())
	outW.Close()
	if inR != nil {
		inR.Close()
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		r.stdout.Close()
		if r.stdin != nil {
			r.stdin.Close()
		}
	})
	return r
}

// line reads one line of fledge's stdout (bounded).
func (r *run) line() string {
	r.e.t.Helper()
	got := make(chan string, 1)
	go func() {
		l, _ := r.out.ReadString('\n')
		got <- l
	}()
	select {
	case l := <-got:
		require.NotEmpty(r.e.t, l, "fledge's stdout ended; stderr: %s", r.stderr.String())
		return l
	case <-time.After(endHangLimit):
		r.e.t.Fatalf("no line on fledge's stdout; stderr: %s", r.stderr.String())
	}
	return ""
}

// drain reads fledge's stdout to its end in the background.
func (r *run) drain() { go func() { _, _ = io.Copy(io.Discard, r.out) }() }

// exit waits for fledge to end and returns its exit status.
func (r *run) exit() int {
	r.e.t.Helper()
	select {
	case <-r.done:
	case <-time.After(endHangLimit):
		r.e.t.Fatalf("fledge did not end; stderr: %s", r.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			r.e.t.Errorf("fledge was killed by %v (stderr: %s)", st.Signal(), r.stderr.String())
			return -1
		}
		return ee.ExitCode()
	}
	require.NoError(r.e.t, r.err)
	return 0
}

// checkEnded is what a user sees after any ending: every session that started a plugin
// ended with its plugin_exit, the log verifies, no process of a plugin is left, and no temp dir or
// cgroup of a run remains.
func (e *endEnv) checkEnded(stderr string, ran bool) {
	t := e.t
	t.Helper()
	// A session that started a plugin (install sessions start none) has its plugin_exit,
	// and `fledge audit sessions` shows it ended.
	started := map[string]string{}
	require.NoError(t, audit.Read(e.auditLog, func(r *audit.Record) error {
		if r.Event == audit.EventPluginStart {
			started[r.Session] = r.Plugin.Name
		}
		return nil
	}))
	if ran {
		assert.Greater(t, len(started), e.started, "the run started no plugin")
	}
	e.started = len(started)
	out, err := e.command("audit", "sessions", "--json").Output()
	require.NoError(t, err)
	ended := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s struct {
			Session string `json:"session"`
			Ended   bool   `json:"ended"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &s), "%q", l)
		ended[s.Session] = s.Ended
	}
	for id, name := range started {
		assert.True(t, ended[id], "session %s of %s never ended (no plugin_exit); fledge's stderr: %s", id, name, stderr)
	}
	v, err := e.command("audit", "verify").CombinedOutput()
	assert.NoError(t, err, "audit verify: %s", v)

	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(e.root)) {
			t.Errorf("a process of the plugin is still running: %s %q", f, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}

	left, err := os.ReadDir(e.tmp)
	require.NoError(t, err)
	for _, d := range left {
		t.Errorf("a temp dir of the run is left in TMPDIR: %s", d.Name())
	}
	for _, g := range e.runCgroups() {
		t.Errorf("a cgroup of the run is left: %s", g)
	}
}

// runCgroups are the run cgroups of e's plugins beside this test's own cgroups (where
// the sandbox makes them: fledge-<plugin>-<id>).
func (e *endEnv) runCgroups() []string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", f[2]), filepath.Join("/sys/fs/cgroup/unified", f[2]))
			continue
		}
		for _, ctl := range strings.Split(f[1], ",") {
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(ctl, "name="), f[2]))
		}
	}
	var left []string
	for _, d := range dirs {
		for _, p := range e.plugins {
			m, _ := filepath.Glob(filepath.Join(d, "fledge-"+p+"-*"))
			left = append(left, m...)
		}
	}
	return left
}

// ending is one way a run ends, done to r once the plugin is at the step under test.
type ending struct {
	name string
	do   func(r *run)
	exit int
}

func signalEnding(sig syscall.Signal) ending {
	return ending{name: sigName(sig), exit: ExitInterrupted, do: func(r *run) {
		r.drain()
		require.NoError(r.e.t, r.cmd.Process.Signal(sig))
	}}
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}

// closedPipe is `| head -1`: the reader takes one line and goes away.
var closedPipe = ending{name: "ClosedStdout", exit: ExitBrokenPipe, do: func(r *run) {
	r.line()
	r.stdout.Close()
}}

// TestSessionEndsPluginCommand: `fledge PLUGIN` (a fledge-v1 plugin) ended by a closed
// stdout, SIGHUP, SIGTERM and SIGINT.
func TestSessionEndsPluginCommand(t *testing.T) {
	e := newEndEnv(t)
	e.install("spill", "fledge-v1", spillPlugin)
	e.checkEnded("", false)
	for _, end := range []ending{closedPipe, signalEnding(syscall.SIGHUP), signalEnding(syscall.SIGTERM), signalEnding(syscall.SIGINT)} {
		t.Run(end.name, func(t *testing.T) {
			e.t = t
			r := e.start(false, "spill")
			if end.name != closedPipe.name {
				r.line()
			}
			end.do(r)
			assert.Equal(t, end.exit, r.exit(), "stderr: %s", r.stderr.String())
			e.checkEnded(r.stderr.String(), true)
		})
	}
}

// TestSessionEndsLegacyPlugin: a legacy plugin (fledge's stdout is its own) ended by a
// closed stdout and by SIGHUP.
func TestSessionEndsLegacyPlugin(t *testing.T) {
	e := newEndEnv(t)
	e.install("oldspill", "", oldSpillPlugin)
	e.checkEnded("", false)
	for _, end := range []ending{closedPipe, signalEnding(syscall.SIGHUP)} {
		t.Run(end.name, func(t *testing.T) {
			e.t = t
			r := e.start(false, "oldspill")
			if end.name != closedPipe.name {
				r.line()
			}
			end.do(r)
			assert.Equal(t, end.exit, r.exit(), "stderr: %s", r.stderr.String())
			e.checkEnded(r.stderr.String(), true)
		})
	}
}

// TestSessionEndsUnconfinedLegacy: an unconfined legacy plugin (legacy = "unconfined") runs
// as the user would run it, in fledge's process group: SIGTERM or SIGHUP sent to fledge
// alone reach it too, so fledge does not wait on a plugin nobody told to stop.
func TestSessionEndsUnconfinedLegacy(t *testing.T) {
	e := newEndEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.home, ".config", "fledge", "config.toml"), []byte("[sandbox]\nlegacy = \"unconfined\"\n"), 0o600))
	e.install("freespill", "", "#!/bin/bash\ni=0\nwhile :; do i=$((i+1)); echo \"line $i\"; sleep 0.01; done\n")
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		t.Run(sigName(sig), func(t *testing.T) {
			e.t = t
			r := e.start(false, "freespill")
			r.line()
			r.drain()
			require.NoError(t, r.cmd.Process.Signal(sig))
			code := r.exit()
			assert.Equal(t, 128+int(sig), code, "the plugin's own status: it died of the signal; stderr: %s", r.stderr.String())
			e.checkEnded(r.stderr.String(), false)
		})
	}
}

// TestSessionEndsPluginsLearn: `fledge plugins learn` runs the plugin as `fledge PLUGIN`
// does: a closed stdout and SIGHUP end its session too.
func TestSessionEndsPluginsLearn(t *testing.T) {
	e := newEndEnv(t)
	e.install("spill", "fledge-v1", spillPlugin)
	for _, end := range []ending{closedPipe, signalEnding(syscall.SIGHUP)} {
		t.Run(end.name, func(t *testing.T) {
			e.t = t
			r := e.start(false, "plugins", "learn", "spill")
			if end.name != closedPipe.name {
				// learn opens the plugin's framed output with a line of its own before
				// the plugin runs: the signal goes once the plugin itself has spoken.
				for !strings.HasPrefix(r.line(), "│ ") {
				}
			}
			end.do(r)
			code := r.exit()
			if end.name == closedPipe.name {
				assert.Equal(t, end.exit, code, "stderr: %s", r.stderr.String())
			} else {
				// learn reports what the traced run was refused, however it ended.
				assert.Contains(t, r.stderr.String(), "the traced run ended with: exit status 130")
			}
			e.checkEnded(r.stderr.String(), true)
		})
	}
}

// TestSessionEndsToolsAndHooks: `fledge tools call` and `fledge hooks run` ended while the
// plugin works (SIGHUP, SIGTERM, SIGINT).
func TestSessionEndsToolsAndHooks(t *testing.T) {
	e := newEndEnv(t)
	e.install("hang", "jsonrpc-2.0", hangPlugin)
	e.checkEnded("", false)
	ready := filepath.Join(e.dataDir("hang"), "ready")
	for _, args := range [][]string{{"tools", "call", "plugin_hang_wait"}, {"hooks", "run", "post_user_input", "--params", "{}"}} {
		for _, end := range []ending{signalEnding(syscall.SIGHUP), signalEnding(syscall.SIGTERM), signalEnding(syscall.SIGINT)} {
			t.Run(args[0]+"/"+end.name, func(t *testing.T) {
				e.t = t
				_ = os.Remove(ready)
				r := e.start(false, args...)
				e.waitFile(ready, r.done, r.stderr.String)
				end.do(r)
				code := r.exit()
				if args[0] == "tools" {
					assert.Equal(t, end.exit, code, "stderr: %s", r.stderr.String())
				}
				e.checkEnded(r.stderr.String(), true)
			})
		}
	}
}

// TestSessionEndsInvoke: `fledge invoke` ended by a closed stdout while chunks stream, and
// by SIGHUP while the plugin works.
func TestSessionEndsInvoke(t *testing.T) {
	e := newEndEnv(t)
	e.install("inv", "invoke-v1", invPlugin)
	e.checkEnded("", false)
	ready := filepath.Join(e.dataDir("inv"), "ready")
	for _, c := range []struct {
		action string
		end    ending
	}{{"count", closedPipe}, {"sleep", signalEnding(syscall.SIGHUP)}, {"sleep", signalEnding(syscall.SIGTERM)}} {
		t.Run(c.end.name, func(t *testing.T) {
			e.t = t
			_ = os.Remove(ready)
			r := e.start(false, "invoke", "inv", "--type", "tool", "--action", c.action)
			e.waitFile(ready, r.done, r.stderr.String)
			c.end.do(r)
			assert.Equal(t, c.end.exit, r.exit(), "stderr: %s", r.stderr.String())
			e.checkEnded(r.stderr.String(), true)
		})
	}
}

// TestSessionEndsServeMCP: `fledge serve --mcp` with a tool call in flight, ended by its
// client closing stdin, closing stdout (then asking something), and by SIGHUP.
func TestSessionEndsServeMCP(t *testing.T) {
	e := newEndEnv(t)
	e.install("hang", "jsonrpc-2.0", hangPlugin)
	e.checkEnded("", false)
	ready := filepath.Join(e.dataDir("hang"), "ready")
	send := func(r *run, msg string) {
		_, _ = io.WriteString(r.stdin, msg+"\n")
	}
	for _, end := range []ending{
		{name: "ClosedStdin", exit: ExitOK, do: func(r *run) { r.drain(); r.stdin.Close() }},
		{name: "ClosedStdout", exit: ExitBrokenPipe, do: func(r *run) {
			r.stdout.Close()
			send(r, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
		}},
		signalEnding(syscall.SIGHUP),
	} {
		t.Run(end.name, func(t *testing.T) {
			e.t = t
			_ = os.Remove(ready)
			r := e.start(true, "serve", "--mcp")
			send(r, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			r.line()
			send(r, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			send(r, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"plugin_hang_wait","arguments":{}}}`)
			e.waitFile(ready, r.done, r.stderr.String)
			end.do(r)
			assert.Equal(t, end.exit, r.exit(), "stderr: %s", r.stderr.String())
			e.checkEnded(r.stderr.String(), true)
		})
	}
}

// TestSessionEndsPTYHangup: the terminal fledge runs on goes away (its pty master is
// closed, as when a terminal window is closed): the kernel sends fledge SIGHUP, and the
// session ends as Ctrl+C ends it, for a fledge-v1 and a legacy plugin.
func TestSessionEndsPTYHangup(t *testing.T) {
	e := newEndEnv(t)
	e.install("spill", "fledge-v1", spillPlugin)
	e.install("oldspill", "", oldSpillPlugin)
	e.checkEnded("", false)
	for _, name := range []string{"spill", "oldspill"} {
		t.Run(name, func(t *testing.T) {
			e.t = t
			ptmx, tty, err := pty.Open()
			if err != nil {
				testutil.SkipUnlessSupported(t, false, "no pseudo-terminal: "+err.Error())
			}
			cmd := e.command(name)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			require.NoError(t, cmd.Start())
			_ = tty.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// fledge's own notes (no project here) share the terminal: the plugin's first
			// line comes within a few.
			screen := bufio.NewReader(ptmx)
			var seen []string
			for i := 0; i < 5; i++ {
				l, err := screen.ReadString('\n')
				require.NoError(t, err, "lines so far: %q", append(seen, l))
				seen = append(seen, l)
				if strings.Contains(l, "line 1") {
					break
				}
			}
			require.Contains(t, seen[len(seen)-1], "line 1", "lines: %q", seen)
			require.NoError(t, ptmx.Close())
			select {
			case err = <-done:
			case <-time.After(endHangLimit):
				_ = cmd.Process.Kill()
				t.Fatal("fledge did not end after its terminal went away")
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				st, _ := ee.Sys().(syscall.WaitStatus)
				assert.False(t, st.Signaled(), "fledge was killed by %v", st.Signal())
			}
			e.checkEnded("", true)
		})
	}
}
