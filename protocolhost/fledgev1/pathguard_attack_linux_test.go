// SPDX-License-Identifier: MIT

package fledgev1

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The Rust fledge host's hole: a cwd component swapped for a symlink to outside between the
// check and the spawn. Here the swap runs continuously while a real plugin sends execs; every
// command that ran must have run inside the project (its own pwd -P says where it was).
func TestPathguardSwapRaceThroughPlugin(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	proj, err := filepath.EvalSymlinks(f.project)
	require.NoError(t, err)
	home, err := filepath.EvalSymlinks(f.home)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(proj, "sw", "x"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(home, "x"), 0o755))
	sw, alt := filepath.Join(proj, "sw"), filepath.Join(proj, "alt")
	require.NoError(t, os.Symlink(home, alt))
	swap := func() error { return unix.Renameat2(unix.AT_FDCWD, sw, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE) }
	err = swap()
	testutil.SkipUnlessSupported(t, err == nil, "renameat2(RENAME_EXCHANGE) on the temp dir's filesystem")

	stop, done := make(chan struct{}), make(chan int)
	go func() {
		flips := 0
		defer func() { done <- flips }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if swap() != nil {
				return
			}
			flips++
		}
	}()
	const n = 40
	var steps []any
	for i := range n {
		steps = append(steps, msg("type", "exec", "id", fmt.Sprint(i), "cwd", []string{"sw/x", "sw", proj + "/sw/x"}[i%3], "command", "pwd -P"))
	}
	_, rep := f.runScript(steps...)
	close(stop)
	flips := <-done
	require.Positive(t, flips)

	ran, refused := 0, 0
	for i := range n {
		ex := f.reply(rep, fmt.Sprint(i))["value"].(map[string]any)
		if ex["code"] == float64(0) {
			ran++
			wd := strings.TrimSpace(fmt.Sprint(ex["stdout"]))
			assert.True(t, strings.HasPrefix(wd, proj+"/"), "exec %d ran in %q, outside the project", i, wd)
			continue
		}
		refused++
		// Refused by the path guard, never a launch that failed under the swaps (the
		// session's launcher meeting a working directory that kept moving once failed
		// such runs as "the session's launcher is gone").
		assert.Equal(t, "path_escape", ex["reason"], "exec %d: %v (its record: %s)", i, ex, outcomeError(t, f.auditPath, ex["reason"]))
	}
	t.Logf("%d execs ran inside the project, %d refused, %d swaps", ran, refused, flips)
}

// outcomeError is the error of the log's exec_outcome records with the given reason (what
// a failed launch says it met).
func outcomeError(t *testing.T, path string, reason any) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		var r struct {
			Event   string         `json:"event"`
			Reason  string         `json:"reason"`
			Details map[string]any `json:"details"`
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.Event == "exec_outcome" && r.Reason == fmt.Sprint(reason) {
			out = append(out, fmt.Sprint(r.Details["error"]))
		}
	}
	return strings.Join(out, "; ")
}
