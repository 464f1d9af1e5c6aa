// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// ptyHangLimit only catches a hung test; nothing here measures speed.
const ptyHangLimit = 60 * time.Second

const (
	keyUp    = "\x1b[A"
	keyDown  = "\x1b[B"
	keyLeft  = "\x1b[D"
	keyEnter = "\r"
)

// askPlugin is a bash fledge-v1 plugin whose first argument picks a scenario. It reports
// everything through output messages, so the test reads it on the terminal.
const askPlugin = `#!/bin/bash
read -r INIT
mode=$(printf '%s' "$INIT" | sed -n 's/.*"args":\["\([^"]*\)".*/\1/p')
out() { printf '{"type":"output","text":"%s\\n"}\n' "$1"; }
# reply ID: reads lines until the response/cancel for ID and prints it with quotes made safe
# for the output message.
reply() {
  while read -r R; do
    case "$R" in *"\"id\":\"$1\""*) printf '%s' "${R//\"/\'}"; return;; esac
  done
}
# Terminal facts, from inside the plugin: it must not hold the user's terminal.
t0=no; [ -t 0 ] && t0=yes
t2=no; [ -t 2 ] && t2=yes
read -r -a st < /proc/self/stat
out "TTY t0=$t0 t2=$t2 sid=${st[5]} tty_nr=${st[6]}"
case "$mode" in
ask)
  echo '{"type":"prompt","id":"1","message":"Deploy target:","default":"staging"}'
  out "ANSWER1 $(reply 1)"
  echo '{"type":"confirm","id":"2","message":"Really deploy?"}'
  out "ANSWER2 $(reply 2)"
  echo '{"type":"select","id":"3","message":"Environment?","options":["staging","production","dev"]}'
  out "ANSWER3 $(reply 3)"
  echo '{"type":"multi_select","id":"4","message":"Regions to deploy:","options":["eu","us","ap"],"defaults":[2]}'
  out "ANSWER4 $(reply 4)"
  printf 'plugin stderr line\n' >&2
  ;;
timeout)
  echo '{"type":"prompt","id":"t","message":"Nobody answers this:"}'
  out "ANSWER_T $(reply t)"
  ;;
wait)
  # Handles SIGINT (a trap interrupts the read with a status above 128) and waits for the
  # cancel that comes with it.
  trap 'out "SIGINT"' INT
  out "READY"
  while :; do
    read -r R || { [ $? -gt 128 ] && continue; exit 0; }
    case "$R" in *'"type":"cancel"'*) out "GOT ${R//\"/\'}"; exit 0;; esac
  done
  ;;
hello)
  echo '{"type":"prompt","id":"h1","message":"Greet whom?","default":"world"}'
  out "HELLO1 $(reply h1)"
  echo '{"type":"prompt","id":"h2","message":"Greet whom again?","default":"world"}'
  out "HELLO2 $(reply h2)"
  ;;
ctrlc)
  # Ignores SIGINT, so only the cancels can stop it.
  trap '' INT
  # Like a plugin that goes on to its next question after a cancelled one: only a session
  # interrupt keeps that question off the screen. A step reached with an answer leaves a marker.
  echo '{"type":"prompt","id":"c1","message":"Interrupt me:","default":"world"}'
  R=$(reply c1)
  case "$R" in *response*) touch "$FLEDGE_DATA_DIR/reached-step2";; esac
  out "STEP1 ${R}"
  echo '{"type":"prompt","id":"c2","message":"Second question:","default":"again"}'
  R=$(reply c2)
  case "$R" in *response*) touch "$FLEDGE_DATA_DIR/reached-step3";; esac
  out "STEP2 ${R}"
  ;;
exit3)
  out "FAILING"
  exit 3
  ;;
segv)
  out "CRASHING"
  kill -SEGV $$
  ;;
stderr)
  printf 'raw:\377\033[31mred\033[0m\tend\r\nsecond\n' >&2
  out "STDERR-DONE"
  ;;
esac
`

// ptyFledge is one real fledge process on a pseudo-terminal, as a user's shell would start
// it: its own session, the pty as controlling terminal.
type ptyFledge struct {
	t      *testing.T
	cmd    *exec.Cmd
	ptmx   *os.File
	screen *syncBuffer
	stderr *bytes.Buffer // only when stderr is a pipe
	copied chan struct{}
	done   chan struct{}
	err    error
}

// syncBuffer is safe for concurrent writers (shared test helper).
type syncBuffer = testutil.SyncBuffer

// ptyEnv is a throwaway home with the ask plugin installed.
type ptyEnv struct {
	fledge string
	home   string
	work   string
	env    []string
}

func newPtyEnv(t *testing.T, config string) *ptyEnv {
	t.Helper()
	fledge, err := exec.LookPath("fledge") // testscript.Main put this test binary there as "fledge"
	require.NoError(t, err)
	root := t.TempDir()
	e := &ptyEnv{fledge: fledge, home: filepath.Join(root, "home"), work: filepath.Join(root, "work")}
	cfgDir := filepath.Join(e.home, ".config", "fledge")
	src := filepath.Join(root, "src", "ask")
	for _, d := range []string{cfgDir, e.work, src} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	if config != "" {
		require.NoError(t, os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte(config), 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(`[plugin]
name = "ask"
version = "1.0.0"
protocol = "fledge-v1"

[[commands]]
name = "ask"
binary = "ask.sh"
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "ask.sh"), []byte(askPlugin), 0o755))
	e.env = []string{
		"HOME=" + e.home,
		"FLEDGE_CONFIG_DIR=" + cfgDir,
		"FLEDGE_AUDIT_LOG=" + filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"),
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"TERM=xterm-256color",
		"LANG=C.UTF-8",
		"NO_COLOR=1",
	}
	install := exec.Command(fledge, "--ni", "plugins", "install", src)
	install.Env, install.Dir = e.env, e.work
	out, err := install.CombinedOutput()
	require.NoError(t, err, "install: %s", out)
	return e
}

// start runs `fledge ask <mode>` with the pty as stdin, stdout and (unless stderrPipe)
// stderr.
func (e *ptyEnv) start(t *testing.T, mode string, stderrPipe bool) *ptyFledge {
	t.Helper()
	return e.startArgs(t, stderrPipe, "ask", mode)
}

// startArgs runs `fledge args...` as start does.
func (e *ptyEnv) startArgs(t *testing.T, stderrPipe bool, args ...string) *ptyFledge {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "no pseudo-terminal: "+err.Error())
	}
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}))
	p := &ptyFledge{t: t, ptmx: ptmx, screen: &syncBuffer{}, copied: make(chan struct{}), done: make(chan struct{})}
	p.cmd = exec.Command(e.fledge, args...)
	p.cmd.Env, p.cmd.Dir = e.env, e.work
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	if stderrPipe {
		p.stderr = &bytes.Buffer{}
		p.cmd.Stderr = p.stderr
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, p.cmd.Start())
	_ = tty.Close() // the child has it; EOF on ptmx then means the session is gone
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(p.screen, ptmx)
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		_ = ptmx.Close()
		<-p.copied
	})
	return p
}

// waitFor waits until re matches the screen and returns the submatches.
func (p *ptyFledge) waitFor(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(ptyHangLimit)
	for {
		if m := rx.FindStringSubmatch(p.screen.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%q never appeared on the terminal; screen:\n%q", re, p.screen.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// press types keys one at a time, the way a person does.
func (p *ptyFledge) press(keys ...string) {
	p.t.Helper()
	for _, k := range keys {
		_, err := p.ptmx.Write([]byte(k))
		require.NoError(p.t, err)
		time.Sleep(30 * time.Millisecond)
	}
}

// exit waits for fledge to end and returns its exit status.
func (p *ptyFledge) exit() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(ptyHangLimit):
		p.t.Fatalf("fledge did not exit; screen:\n%q", p.screen.String())
	}
	<-p.copied
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(p.t, p.err)
	return 0
}

// checkPluginOffTerminal asserts what the plugin reported about its terminal: none of its
// stdio is a tty, it has no controlling terminal and its session is not fledge's.
func (p *ptyFledge) checkPluginOffTerminal() {
	p.t.Helper()
	m := p.waitFor(`TTY t0=(\w+) t2=(\w+) sid=(\d+) tty_nr=(\d+)`)
	assert.Equal(p.t, "no", m[1], "plugin stdin must not be a terminal")
	assert.Equal(p.t, "no", m[2], "plugin stderr must not be a terminal")
	assert.Equal(p.t, "0", m[4], "plugin must have no controlling terminal")
	// fledge was started with setsid: its session id is its pid.
	assert.NotEqual(p.t, strconv.Itoa(p.cmd.Process.Pid), m[3], "plugin must run in its own session")
}

func TestPTYInteractivePrompts(t *testing.T) {
	e := newPtyEnv(t, "")
	p := e.start(t, "ask", false)
	p.checkPluginOffTerminal()

	p.waitFor("Deploy target")
	p.press("e", "u", keyEnter)
	p.waitFor("ANSWER1 ")
	p.waitFor("Really deploy")
	p.press(keyLeft, keyEnter)
	p.waitFor("ANSWER2 ")
	p.waitFor("Environment")
	p.press(keyDown, keyEnter)
	p.waitFor("ANSWER3 ")
	p.waitFor("Regions to deploy")
	p.press(keyUp, " ", keyEnter)
	p.waitFor("ANSWER4 ")
	require.Equal(t, 0, p.exit(), "screen:\n%q", p.screen.String())

	screen := p.screen.String()
	assert.Contains(t, screen, `ANSWER1 {'type':'response','id':'1','value':'eu'}`)
	assert.Contains(t, screen, `ANSWER2 {'type':'response','id':'2','value':true}`)
	assert.Contains(t, screen, `ANSWER3 {'type':'response','id':'3','value':'production'}`)
	assert.Contains(t, screen, `ANSWER4 {'type':'response','id':'4','value':['us','ap']}`)
	assert.Contains(t, screen, "plugin stderr line", "plugin stderr is forwarded to fledge's stderr")
}

func TestPTYPromptTimeout(t *testing.T) {
	e := newPtyEnv(t, "[limits]\nprompt_timeout = \"1s\"\n")
	p := e.start(t, "timeout", false)
	p.waitFor("Nobody answers this")
	// Nobody types: after prompt_timeout the plugin gets a cancel with reason timeout.
	p.waitFor("ANSWER_T ")
	require.Equal(t, 0, p.exit(), "screen:\n%q", p.screen.String())
	assert.Contains(t, p.screen.String(), `ANSWER_T {'type':'cancel','id':'t','reason':'timeout'}`)
}

func TestPTYInterrupt(t *testing.T) {
	e := newPtyEnv(t, "")
	for name, interrupt := range map[string]func(p *ptyFledge){
		"SIGINT to fledge": func(p *ptyFledge) {
			require.NoError(p.t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGINT))
		},
		// Ctrl+C on the terminal signals its foreground group: fledge, never the plugin
		// (its own session); fledge passes the SIGINT on to the plugin's group.
		"ctrl+c on the terminal": func(p *ptyFledge) { p.press("\x03") },
	} {
		t.Run(name, func(t *testing.T) {
			p := e.start(t, "wait", false)
			p.checkPluginOffTerminal()
			p.waitFor("READY")
			interrupt(p)
			p.waitFor("GOT ")
			assert.Equal(t, 130, p.exit(), "screen:\n%q", p.screen.String())
			assert.Contains(t, p.screen.String(), `GOT {'type':'cancel','reason':'user_interrupt'}`)
			assert.Contains(t, p.screen.String(), "SIGINT", "the plugin's group gets the terminal's SIGINT")
		})
	}
}

func TestPTYStderrUnchanged(t *testing.T) {
	e := newPtyEnv(t, "")
	p := e.start(t, "stderr", true)
	p.checkPluginOffTerminal()
	p.waitFor("STDERR-DONE")
	require.Equal(t, 0, p.exit(), "screen:\n%q", p.screen.String())
	// Byte for byte, escape sequences and invalid UTF-8 included: fledge forwards the
	// plugin's stderr, it does not render it.
	want := []byte("raw:\xff\x1b[31mred\x1b[0m\tend\r\nsecond\n")
	assert.True(t, bytes.Contains(p.stderr.Bytes(), want), "stderr: %q", p.stderr.String())
}

// The default is shown and typed text replaces it (not "worldBob"); Enter alone takes it.
func TestPTYPromptDefaultReplacedByTyping(t *testing.T) {
	e := newPtyEnv(t, "")
	p := e.start(t, "hello", false)
	p.waitFor("Greet whom\\?")
	p.press("B", "o", "b", keyEnter)
	p.waitFor("HELLO1 ")
	p.waitFor("Greet whom again")
	p.press(keyEnter)
	p.waitFor("HELLO2 ")
	require.Equal(t, 0, p.exit(), "screen:\n%q", p.screen.String())
	screen := p.screen.String()
	assert.Contains(t, screen, `HELLO1 {'type':'response','id':'h1','value':'Bob'}`)
	assert.Contains(t, screen, `HELLO2 {'type':'response','id':'h2','value':'world'}`)
}

// Ctrl+C at a question is a session interrupt, as outside one: the plugin (here one that
// ignores SIGINT; TestPTYCtrlCStopsHostPlugin has one that does not) is cancelled,
// fledge exits 130, and the plugin never gets an answer to go on with (no marker), nor is
// its next question shown.
func TestPTYCtrlCAtPrompt(t *testing.T) {
	e := newPtyEnv(t, "")
	dataDir := filepath.Join(e.home, ".config", "fledge", "plugins", "ask", "data")
	p := e.start(t, "ctrlc", false)
	p.waitFor("Interrupt me")
	p.press("\x03")
	assert.Equal(t, 130, p.exit(), "screen:\n%q", p.screen.String())
	for _, marker := range []string{"reached-step2", "reached-step3"} {
		assert.NoFileExists(t, filepath.Join(dataDir, marker), "the plugin went on after Ctrl+C")
	}
	screen := p.screen.String()
	assert.Contains(t, screen, `STEP1 {'type':'cancel','id':'c1','reason':'user_interrupt'}`)
	assert.Contains(t, screen, `STEP2 {'type':'cancel','id':'c2','reason':'user_interrupt'}`,
		"a question asked after the interrupt is cancelled at once")
	assert.NotContains(t, screen, "Second question", "and never shown")
}

// A plugin's non-zero end is reported on stderr, naming it, and passed on as fledge's status.
func TestPTYPluginExitReported(t *testing.T) {
	e := newPtyEnv(t, "")
	cases := []struct {
		mode, ready, want string
		code              int
	}{
		{"exit3", "FAILING", "fledge: plugin ask exited with code 3\n", 3},
		{"segv", "CRASHING", "fledge: plugin ask killed by SIGSEGV\n", 128 + int(syscall.SIGSEGV)},
		{"stderr", "STDERR-DONE", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			p := e.start(t, tc.mode, true)
			p.waitFor(tc.ready)
			assert.Equal(t, tc.code, p.exit(), "screen:\n%q", p.screen.String())
			if tc.want == "" {
				assert.NotContains(t, p.stderr.String(), "fledge: plugin", "success is not reported")
				return
			}
			assert.Contains(t, p.stderr.String(), tc.want)
		})
	}
}
