// SPDX-License-Identifier: MIT

//go:build race

package fledgev1

// raceEnabled: the race detector multiplies memory use, so RSS bounds are not checked.
const raceEnabled = true
