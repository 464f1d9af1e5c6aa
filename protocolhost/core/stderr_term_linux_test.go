// SPDX-License-Identifier: MIT

package core

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// TestSpawnStderrToTerminalIsSanitised: whatever adapter calls Spawn, a plugin's stderr
// given a terminal reaches it only sanitised: an OSC 52 clipboard write, a title and a
// cursor-report query are gone, text and colour arrive. Positive control: the same bytes
// given to a writer that is not a terminal pass unchanged.
func TestSpawnStderrToTerminalIsSanitised(t *testing.T) {
	testutil.RequireContained(t)
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
	script := `printf 'plain \033[32mgreen\033[0m\n\033]52;c;Y2xpcA==\007\033]0;title\007\033[6n' >&2; printf 'done\n' >&2`
	run := func(stderr io.Writer) {
		rec := NewRecorder(&memLog{}, "s1", &audit.PluginRef{Name: "core-test"}, sandbox.Report{}, nil)
		p, err := Spawn(SpawnOptions{Sandbox: newSandbox(t), Spec: shSpec(t, script), Cwd: "/", Pipes: true, Stderr: stderr, Recorder: rec})
		require.NoError(t, err)
		p.Finish(nil)
	}
	run(tty)
	tty.Close() // EOF for the copy once everything written is read
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatalf("terminal never drained: %q", screen.String())
	}
	got := screen.String()
	assert.Contains(t, got, "plain \x1b[32mgreen\x1b[0m")
	assert.Contains(t, got, "done")
	for _, d := range []string{"\x1b]", "Y2xpcA==", "title", "\x1b[6n"} {
		assert.NotContains(t, got, d)
	}

	var file strings.Builder
	run(&file)
	assert.Contains(t, file.String(), "\x1b]52;c;Y2xpcA==\x07", "control: the plugin writes it")
}
