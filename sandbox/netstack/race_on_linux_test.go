// SPDX-License-Identifier: MIT

//go:build linux && race

package netstack

// raceEnabled: the race detector multiplies the host's memory per goroutine and allocation,
// so a memory bound measured without it says nothing under it.
const raceEnabled = true
