// SPDX-License-Identifier: MIT

package core

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestQuarantineWarningToTerminalIsSanitised: the gitlink path of a quarantined nested
// repository is chosen by the plugin (any byte but NUL and '/'), and the warning that names
// it goes to the user's terminal. Spawn with no Warn (what the jsonrpc, invokev1,
// runtimev1 and mcp adapters pass) writes it with fmt.Fprintln(os.Stderr): a directory named
// "x ESC ]52;c;... BEL" puts an OSC 52 clipboard write on the terminal, past the sanitiser
// the plugin's own stderr goes through. Control: the same bytes written by the plugin to its
// stderr (the tty too) arrive sanitised.
func TestQuarantineWarningToTerminalIsSanitised(t *testing.T) {
	testutil.RequireContained(t)
	git, err := exec.LookPath("git")
	testutil.SkipUnlessSupported(t, err == nil, "needs git")
	ptmx, tty, err := pty.Open()
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "no pseudo-terminal: "+err.Error())
	}
	defer ptmx.Close()
	screen := &testutil.SyncBuffer{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(screen, ptmx)
	}()

	proj := t.TempDir()
	c := exec.Command(git, "init", "-q", proj)
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	require.NoError(t, c.Run())
	// The directory name carries an OSC 52 clipboard write ("pwned" in base64).
	script := `d=$(printf 'x\033]52;c;cHduZWQ=\007') && git init -q "$d" && ` +
		`git update-index --add --cacheinfo 160000,1111111111111111111111111111111111111111,"$d" && ` +
		`printf 'stderr \033]52;c;c3RkZXJy\007\n' >&2`

	stderr := os.Stderr
	os.Stderr = tty // the CLI's stderr is the user's terminal
	defer func() { os.Stderr = stderr }()
	rec := NewRecorder(&memLog{}, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
	p, err := Spawn(SpawnOptions{
		Sandbox: newSandbox(t),
		Spec: sandbox.Spec{
			Kind: sandbox.KindPlugin, Name: "core-test", Path: "/bin/sh", Args: []string{"sh", "-c", script},
			Env:    []string{"PATH=/usr/bin:/bin", "HOME=" + proj, "GIT_CONFIG_NOSYSTEM=1"},
			Access: sandbox.Access{ReadExec: policy.SystemPaths, ReadWrite: []string{proj}, ReadOnly: []string{"/etc"}},
			Limits: sandbox.Limits{Pids: 32, MemoryBytes: 256 << 20},
		},
		Cwd: proj, Pipes: true, Stderr: tty, Recorder: rec,
	})
	require.NoError(t, err)
	ex := p.Finish(nil)
	os.Stderr = stderr
	require.Equal(t, 0, ex.Code)
	tty.Close()
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatalf("terminal never drained: %q", screen.String())
	}
	got := screen.String()
	matches, _ := filepath.Glob(filepath.Join(proj, "x*", ".git.fledge-quarantine-*"))
	require.Len(t, matches, 1, "the nested repository was quarantined (the warning was written)")
	assert.Contains(t, got, "stderr ", "control: the plugin's stderr reached the terminal")
	assert.NotContains(t, got, "c3RkZXJy", "control: the plugin's own stderr is sanitised")
	assert.Contains(t, got, "fledge-quarantine", "the warning reached the terminal")
	assert.NotContains(t, got, "\x1b]52", "an OSC 52 clipboard write reached the terminal through the quarantine warning: %q", got)
}
