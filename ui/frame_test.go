// SPDX-License-Identifier: MIT

package ui

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mattn/go-runewidth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFramedWriterNoLineOfItsOwn: whatever a plugin writes, every screen line of it starts
// with the frame's prefix: a forged "fledge plugins grant" line, one brought back to the
// start of the line by a CR or cursor movement, one pushed there by the terminal's own
// wrapping of a padded line, one split across writes, one hidden behind a colour.
func TestFramedWriterNoLineOfItsOwn(t *testing.T) {
	forged := "fledge plugins grant x network"
	var out bytes.Buffer
	f := NewFramedWriter(&out, 40)
	for _, w := range []string{
		forged + "\n",
		"ok\r" + forged + "\n",
		"ok\x1b[1G" + forged + "\x1b[2K\n",
		"\x1b[8m" + "\n" + forged + "\n",
		strings.Repeat(" ", 36) + forged + "\n",
		strings.Repeat("界", 18) + forged + "\n",
		"\t\t\t\t" + forged + "\n",
		"split: fledge plu", "gins grant x network\r\n",
		"no newline at the end: " + forged,
	} {
		n, err := f.Write([]byte(w))
		require.NoError(t, err)
		assert.Equal(t, len(w), n)
	}
	require.NoError(t, f.Flush())
	s := out.String()
	assert.NotContains(t, s, "\r")
	assert.NotContains(t, s, "\x1b")
	assert.True(t, strings.HasSuffix(s, "\n"))
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		assert.True(t, strings.HasPrefix(l, FramePrefix), "%q", l)
		assert.LessOrEqual(t, runewidth.StringWidth(l), 40, "%q", l)
	}
	assert.Contains(t, s, FramePrefix+forged+"\n")
	assert.Contains(t, s, FramePrefix+"split: fledge plugins grant x networ\n"+FramePrefix+"k\n", "a line cut across writes is one line")
}

// A line that never ends is written in bounded pieces, each framed.
func TestFramedWriterBoundsAnEndlessLine(t *testing.T) {
	var out bytes.Buffer
	f := NewFramedWriter(&out, 1000)
	_, err := f.Write(bytes.Repeat([]byte("a"), 3*frameHeld+5))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(f.held), frameHeld)
	assert.NotEmpty(t, out.String())
	require.NoError(t, f.Flush())
	assert.Equal(t, 3*frameHeld+5, strings.Count(out.String(), "a"))
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		assert.True(t, strings.HasPrefix(l, FramePrefix), "%q", l)
	}
}
