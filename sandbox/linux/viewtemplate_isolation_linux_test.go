// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
)

// startWaitingFor starts spec and returns once its stdout holds line (the run is ready).
func startWaitingFor(t *testing.T, sb *Sandbox, spec *sandbox.Spec, line string) sandbox.Process {
	t.Helper()
	var out bytes.Buffer
	w := &lineWaiter{want: line, ch: make(chan struct{})}
	spec.Stdout = w
	spec.Stderr = &out
	p, err := sb.Start(context.Background(), spec)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Kill(); waitFor(t, p) })
	select {
	case <-w.ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("run never printed %q: %s", line, out.String())
	}
	return p
}

// TestViewTemplateRunsIsolated attacks a concurrent run of the same session (and of
// another plugin with the same grants, which shares the template) through the copy of the
// template: its TMPDIR mount must not propagate into other copies (a shared mount would),
// the template's /tmp is read-only (nothing planted there reaches a later run), a
// directory made where a later run's TMPDIR mount point goes is impossible, and a file
// planted in the run's own TMPDIR is gone for the next run.
func TestViewTemplateRunsIsolated(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	e := newEnv(t)
	victim := e.spec(`echo VICTIM-SECRET > "$TMPDIR/secret"; echo "$TMPDIR" > tmpdir-of-victim; echo ready; sleep 30`)
	startWaitingFor(t, sb, victim, "ready")
	b, err := os.ReadFile(filepath.Join(e.project, "tmpdir-of-victim"))
	require.NoError(t, err)
	vtmp := strings.TrimSpace(string(b))
	require.True(t, strings.HasPrefix(vtmp, "/tmp/fledge-tmp-"), vtmp)

	for _, name := range []string{"test plugin/../x", "other-plugin"} {
		t.Run(name, func(t *testing.T) {
			spec := e.spec(attemptScript+`
cat "$1/secret" 2>/dev/null && echo READ-VICTIM
cat /tmp/fledge-tmp-*/secret 2>/dev/null && echo READ-VICTIM-GLOB
attempt plant-tmp sh -c 'echo x > /tmp/planted'
attempt mkdir-tmp mkdir /tmp/fledge-tmp-next
attempt rmdir-victim-mp rmdir "$1"
attempt mount-victim-mp sh -c 'echo x > "$1/x"' sh "$1"
echo mine > "$TMPDIR/leftover"; echo "$TMPDIR" > tmpdir-prev
echo done`, "sh", vtmp)
			spec.Name = name
			res, out, errOut := run(t, sb, spec)
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			assert.NotContains(t, out, "READ-VICTIM")
			assert.NotContains(t, out, "VICTIM-SECRET")
			requireRefused(t, out, "plant-tmp", "mkdir-tmp", "rmdir-victim-mp", "mount-victim-mp")
			assert.True(t, strings.HasSuffix(out, "done\n"), out)
			// The next run: nothing of the previous one in /tmp or its TMPDIR.
			prev, err := os.ReadFile(filepath.Join(e.project, "tmpdir-prev"))
			require.NoError(t, err)
			res, out, errOut = run(t, sb, e.spec(`ls /tmp/planted "$1/leftover" "$TMPDIR" 2>&1; cat "$TMPDIR"/* 2>/dev/null; echo end`, "sh", strings.TrimSpace(string(prev))))
			require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			assert.NotContains(t, out, "mine")
			assert.Contains(t, out, "'/tmp/planted': No such file")
			assert.Contains(t, out, "/leftover': No such file")
		})
	}
}
