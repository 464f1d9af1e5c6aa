// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestViewTemplateReuseAndFreshness: a session's runs share one template, each run's
// TMPDIR is its own and its mount point is gone afterwards, and a grant replaced on disk
// (removed and made again at the same path) is seen as the new one, never the old.
func TestViewTemplateReuseAndFreshness(t *testing.T) {
	sb := newSandbox(t, Options{Launch: LaunchThread})
	requireView(t, sb)
	require.NotNil(t, sb.templates)
	e := newEnv(t)
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "f"), []byte("one\n"), 0o644))

	// Concurrent runs: each writes into its own TMPDIR and lists it.
	var wg sync.WaitGroup
	outs := make([]string, 6)
	for i := range outs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			spec := e.spec(fmt.Sprintf(`echo %d > "$TMPDIR/mine"; sleep 0.2; ls "$TMPDIR"; cat "$TMPDIR/mine"; cat f`, i))
			res, out, errOut := run(t, sb, spec)
			assert.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
			outs[i] = out
		}(i)
	}
	wg.Wait()
	for i, out := range outs {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		assert.Equal(t, "mine", lines[0], "TMPDIR holds only the run's own file")
		assert.Equal(t, fmt.Sprint(i), lines[1])
		assert.Equal(t, "one", lines[2], "the project is read through the template")
	}
	sb.templates.mu.Lock()
	require.Len(t, sb.templates.m, 1, "one template for the session's runs")
	var vt *viewTemplate
	for _, v := range sb.templates.m {
		vt = v
	}
	sb.templates.mu.Unlock()
	assert.EqualValues(t, len(outs), vt.t.Entered(), "every run entered the template")
	// Cleanup runs after Wait, off the reply path: wait for it, then the template's /tmp
	// holds no run's mount point any more.
	sb.cleanups.Wait()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", vt.t.TmpFD()))
	require.NoError(t, err)
	var left []string
	for _, d := range ents {
		if strings.HasPrefix(d.Name(), "fledge-tmp-") {
			left = append(left, d.Name())
		}
	}
	assert.Empty(t, left, "TMPDIR mount points left in the template")
	assert.NotEmpty(t, ents, "the template's /tmp holds the way to the project")

	// The project replaced on disk: the next run sees the new one.
	require.NoError(t, os.RemoveAll(e.project))
	require.NoError(t, os.MkdirAll(e.project, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(e.project, "f"), []byte("two\n"), 0o644))
	d, err := os.Open(e.project)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	e.dir = d
	res, out, errOut := run(t, sb, e.spec(`cat f; echo new > g`))
	require.Equal(t, 0, res.ExitCode, "%s%s", out, errOut)
	assert.Equal(t, "two\n", out)
	b, err := os.ReadFile(filepath.Join(e.project, "g"))
	require.NoError(t, err)
	assert.Equal(t, "new\n", string(b), "writes land in the new project")
	sb.templates.mu.Lock()
	defer sb.templates.mu.Unlock()
	require.Len(t, sb.templates.m, 1)
	for _, v := range sb.templates.m {
		assert.NotSame(t, vt, v, "a new template for the new project")
		assert.EqualValues(t, 1, v.t.Entered())
	}
}
