// SPDX-License-Identifier: MIT

package ui

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The no-copy paths of sanitize and clipLines must give exactly what the full ones give.
func FuzzSanitizeFastPath(f *testing.F) {
	for _, s := range []string{"", "plain", "tab\there\n", "\x1b[31mred", "\x7f", "caf\u00e9", "a\rb", strings.Repeat("x", MaxLineBytes+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, sgr := range []bool{true, false} {
			require.Equal(t, sanitizeSlow(in, sgr), sanitize(in, sgr))
		}
		clean := Sanitize(in)
		require.Equal(t, clipLinesFull(clean, 16, 3), clipLines(clean, 16, 3))
	})
}
