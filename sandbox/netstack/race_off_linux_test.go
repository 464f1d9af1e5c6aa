// SPDX-License-Identifier: MIT

//go:build linux && !race

package netstack

const raceEnabled = false
