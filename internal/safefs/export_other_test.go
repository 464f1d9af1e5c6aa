// SPDX-License-Identifier: MIT

//go:build unix && !linux

package safefs

import "testing"

// forceWalk is nil: the walk is the only way here.
var forceWalk func(t *testing.T)
