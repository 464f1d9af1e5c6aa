// SPDX-License-Identifier: MIT

//go:build unix

package stub

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox"
)

// A "stub" that exits without reaching exec (here: not a stub at all) is a launch failure,
// never a successful run.
func TestLaunchWithoutExecMarkFails(t *testing.T) {
	stdio, err := OpenStdio(nil, nil, nil)
	require.NoError(t, err)
	defer stdio.Abort()
	l := &Launch{
		StubPath: "/bin/true",
		Policy:   &Policy{Path: "/bin/true", Args: []string{"true"}},
		Stdin:    stdio.Files[0], Stdout: stdio.Files[1], Stderr: stdio.Files[2],
	}
	p, err := l.Start()
	assert.Nil(t, p)
	require.ErrorIs(t, err, sandbox.ErrLaunch)
	require.ErrorIs(t, err, ErrStubFailed)
	assert.Contains(t, err.Error(), "before exec")
}
