// SPDX-License-Identifier: MIT

package core

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/ui"
)

// TestRedactWarningsKeepsConsole: the session's UI wrapped to redact warnings is still the
// console's Holder (piped output written once per read of the plugin's pipe) and
// TextCopier (output and log messages read without garbage), and holds as the console does.
func TestRedactWarningsKeepsConsole(t *testing.T) {
	var out, errb bytes.Buffer
	u := (&Env{}).RedactWarnings(ui.New(ui.Options{Out: &out, Err: &errb}))
	h, ok := u.(ui.Holder)
	require.True(t, ok, "the wrapped console must still hold piped output")
	_, ok = u.(ui.TextCopier)
	require.True(t, ok, "the wrapped console must still say it copies what it keeps")
	h.Hold()
	u.Output("a\n")
	u.Output("b\n")
	assert.Empty(t, out.String(), "held until Release")
	h.Release()
	assert.Equal(t, "a\nb\n", out.String())
	u.Close()
}
