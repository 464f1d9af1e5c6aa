// SPDX-License-Identifier: MIT

package reason

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every code has its own documented exit status, and the table in docs/cli.md says the same.
func TestExitStatusDocumented(t *testing.T) {
	readme, err := os.ReadFile("../docs/cli.md")
	require.NoError(t, err)
	for _, c := range All {
		s := ExitStatus(c)
		if c == OK {
			assert.Equal(t, 0, s)
			continue
		}
		if c != ToolError { // the one code that is the tool's own failure
			assert.NotEqual(t, ToolFailed, s, "%s must not look like a tool's own failure", c)
		}
		row := "| `" + string(c) + "` | " + strconv.Itoa(s) + " |"
		assert.True(t, strings.Contains(string(readme), row), "docs/cli.md lacks the row %q", row)
	}
	assert.Equal(t, ToolFailed, ExitStatus("no_such_code"))
}
