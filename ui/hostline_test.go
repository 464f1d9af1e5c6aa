// SPDX-License-Identifier: MIT

package ui

import (
	"os"
	"testing"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostLineSanitisesOnlyTerminals: a host line quoting plugin-chosen text is sanitised on
// a terminal and kept byte for byte in a file (as PluginStream does), with one newline.
func TestHostLineSanitisesOnlyTerminals(t *testing.T) {
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	defer ptmx.Close()
	defer tty.Close()
	line := "fledge: left x\x1b]52;c;cHduZWQ=\a"
	require.NoError(t, HostLine(tty, line))
	buf := make([]byte, 256)
	n, err := ptmx.Read(buf)
	require.NoError(t, err)
	assert.NotContains(t, string(buf[:n]), "\x1b]52")
	assert.Contains(t, string(buf[:n]), "fledge: left x")

	f, err := os.CreateTemp(t.TempDir(), "log")
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, HostLine(f, line))
	got, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	assert.Equal(t, line+"\n", string(got))
}
