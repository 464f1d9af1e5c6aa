// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"bytes"
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

	"github.com/fledgehq/fledge/testkit/testutil"
)

// termPlugin is a legacy plugin (no protocol) that writes, on stdout and on stderr, plain
// text and a colour among sequences that drive a terminal instead of being shown: the
// clipboard (OSC 52, once split across two writes), the window title (OSC 0 and 2), DCS
// strings (DECRQSS, a sixel), and queries the terminal answers by typing into the user's
// input (CSI 6n cursor report, CSI 21t title report). Then it reads a line from stdin:
// the terminal must still reach it.
const termPlugin = `#!/bin/bash
attack() {
  printf '%s-start \033[31mred-%s\033[0m\n' "$1" "$1"
  printf '\033]52;c;c2VjcmV0LWNsaXA=\007'
  printf '\033]0;pwned-title\033\\'
  printf '\033]2;pwned-title\007'
  printf '\033P$qm\033\\'
  printf '\033Pq#0;2;0;0;0\033\\'
  printf '\033[6n'
  printf '\033[21t'
  printf '\033]5'
  sleep 0.2
  printf '2;c;c3BsaXQtY2xpcA==\007'
  printf '%s-end\n' "$1"
}
attack out
attack err >&2
read -r line
echo "GOT $line"
`

// dangerous are the sequences (and payloads) of termPlugin that must not reach a terminal.
var dangerous = []string{
	"\x1b]", "\x1bP", "\x1b[6n", "\x1b[21t",
	"c2VjcmV0LWNsaXA=", "c3BsaXQtY2xpcA==", "pwned-title", "$qm",
}

func installTermPlugin(t *testing.T) (fledge string, env []string, work string) {
	t.Helper()
	fledge, err := exec.LookPath("fledge") // testscript.Main put this test binary there as "fledge"
	require.NoError(t, err)
	root := t.TempDir()
	home, work, src := filepath.Join(root, "home"), filepath.Join(root, "work"), filepath.Join(root, "src")
	cfgDir := filepath.Join(home, ".config", "fledge")
	for _, d := range []string{cfgDir, work, src} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(`[plugin]
name = "term"
version = "1.0.0"

[[commands]]
name = "term"
binary = "term.sh"
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "term.sh"), []byte(termPlugin), 0o755))
	env = []string{
		"HOME=" + home, "FLEDGE_CONFIG_DIR=" + cfgDir,
		"FLEDGE_AUDIT_LOG=" + filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"),
		"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm-256color", "LANG=C.UTF-8", "NO_COLOR=1",
	}
	install := exec.Command(fledge, "--ni", "plugins", "install", src)
	install.Env, install.Dir = env, work
	out, err := install.CombinedOutput()
	require.NoError(t, err, "install: %s", out)
	return fledge, env, filepath.Join(src, "term.sh")
}

// onPTY runs cmd with a new pty as its controlling terminal and stdin, stdout and stderr,
// types input once want appears, and returns everything the terminal received.
func onPTY(t *testing.T, cmd *exec.Cmd, want, input string) string {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "no pseudo-terminal: "+err.Error())
	}
	defer ptmx.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	_ = tty.Close()
	screen := &testutil.SyncBuffer{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(screen, ptmx)
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(ptyHangLimit)
	for !strings.Contains(screen.String(), want) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("%q never appeared on the terminal; screen:\n%q", want, screen.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = ptmx.Write([]byte(input))
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err, "screen:\n%q", screen.String())
	case <-time.After(ptyHangLimit):
		_ = cmd.Process.Kill()
		t.Fatalf("did not exit; screen:\n%q", screen.String())
	}
	<-copied
	return screen.String()
}

// TestLegacyPluginEscapesOffTheTerminal: a legacy plugin's stdout and stderr reach the
// user's terminal only through the sanitiser: text and colours arrive, none of the
// sequences that drive the terminal do, and the terminal still reaches its stdin.
// Positive control: the same script run directly on a terminal puts every one there.
func TestLegacyPluginEscapesOffTheTerminal(t *testing.T) {
	fledge, env, script := installTermPlugin(t)

	control := exec.Command(script)
	control.Env = env
	raw := onPTY(t, control, "err-end", "hello\r")
	for _, d := range dangerous {
		assert.Contains(t, raw, d, "control: the plugin really writes %q", d)
	}

	cmd := exec.Command(fledge, "term")
	cmd.Env = env
	screen := onPTY(t, cmd, "err-end", "hello\r")
	t.Logf("screen: %q", screen)
	for _, want := range []string{"out-start", "out-end", "err-start", "err-end", "GOT hello", "\x1b[31mred-out\x1b[0m", "\x1b[31mred-err\x1b[0m"} {
		assert.Contains(t, screen, want)
	}
	for _, d := range dangerous {
		assert.NotContains(t, screen, d, "%q reached the terminal", d)
	}
}

// TestLegacyPluginBytesUnchangedOffTerminal: to a file or pipe a legacy plugin's output
// passes byte for byte (binary output, logs), escape sequences included: nothing there
// interprets them.
func TestLegacyPluginBytesUnchangedOffTerminal(t *testing.T) {
	fledge, env, _ := installTermPlugin(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(fledge, "--ni", "term")
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, strings.NewReader("piped\n"), &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %q", stderr.String())
	assert.Contains(t, stdout.String(), "\x1b]52;c;c2VjcmV0LWNsaXA=\x07")
	assert.Contains(t, stdout.String(), "\x1b]52;c;c3BsaXQtY2xpcA==\x07")
	assert.Contains(t, stderr.String(), "\x1b[6n")
	assert.Contains(t, stdout.String(), "GOT piped")
}
