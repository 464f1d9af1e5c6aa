// SPDX-License-Identifier: MIT

//go:build unix

package fallback

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/stub"
)

func TestMain(m *testing.M) {
	stub.MaybeRun()
	os.Exit(m.Run())
}

func spec(t *testing.T, script string) *sandbox.Spec {
	dir, err := os.Open(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { dir.Close() })
	return &sandbox.Spec{
		Name: "fb", Path: "/bin/sh", Args: []string{"sh", "-c", script},
		Dir: dir, DirPath: dir.Name(), Env: []string{"PATH=/usr/bin:/bin"},
		PrivateTmp: true,
		Limits:     sandbox.Limits{Timeout: time.Minute, KillGrace: 200 * time.Millisecond},
	}
}

func TestFallback(t *testing.T) {
	sb, err := New(Options{})
	require.NoError(t, err)
	assert.Equal(t, "none", sb.Report().Confinement)

	t.Run("strict refused", func(t *testing.T) {
		s := spec(t, "true")
		s.Strict = true
		_, err := sb.Start(context.Background(), s)
		require.ErrorIs(t, err, sandbox.ErrUnavailable)
	})
	t.Run("exit, cwd, tmp, no tty", func(t *testing.T) {
		s := spec(t, `pwd; test -d "$TMPDIR" && echo tmp; (exec 3</dev/tty) 2>/dev/null && echo tty; exit 5`)
		var out bytes.Buffer
		s.Stdout = &out
		p, err := sb.Start(context.Background(), s)
		require.NoError(t, err)
		res, err := p.Wait()
		require.NoError(t, err)
		assert.Equal(t, 5, res.ExitCode)
		lines := strings.Fields(out.String())
		require.Len(t, lines, 2, out.String())
		assert.Equal(t, "tmp", lines[1])
		assert.Equal(t, "none", res.Mode.Confinement)
		assert.NotEmpty(t, res.Mode.Degraded)
	})
	t.Run("timeout kills the group", func(t *testing.T) {
		s := spec(t, `sleep 1000 & trap "" TERM; sleep 1000`)
		s.Limits.Timeout = 200 * time.Millisecond
		var out bytes.Buffer
		s.Stdout = &out // the background sleep holds the pipe until the group dies
		p, err := sb.Start(context.Background(), s)
		require.NoError(t, err)
		res, err := p.Wait()
		require.NoError(t, err)
		assert.True(t, res.TimedOut)
		assert.Equal(t, "SIGKILL", res.Signal)
	})
}
