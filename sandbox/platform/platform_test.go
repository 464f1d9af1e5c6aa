// SPDX-License-Identifier: MIT

package platform

import (
	"bytes"
	"context"
	"os"
	"runtime"
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

func TestNewRunsACommand(t *testing.T) {
	sb, err := New(Options{})
	require.NoError(t, err)
	rep := sb.Report()
	assert.Equal(t, runtime.GOOS, rep.OS)
	dir, err := os.Open(t.TempDir())
	require.NoError(t, err)
	defer dir.Close()
	var out bytes.Buffer
	p, err := sb.Start(context.Background(), &sandbox.Spec{
		Name: "platform", Path: "/bin/sh", Args: []string{"sh", "-c", "echo hi; exit 4"},
		Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out,
		Access: sandbox.Access{ReadExec: []string{"/usr", "/bin", "/lib", "/lib64", "/sbin"}},
		Limits: sandbox.Limits{Timeout: time.Minute},
	})
	require.NoError(t, err)
	res, err := p.Wait()
	require.NoError(t, err)
	assert.Equal(t, 4, res.ExitCode)
	assert.Equal(t, "hi\n", out.String())
	assert.NotEmpty(t, res.Mode.Confinement)
}
