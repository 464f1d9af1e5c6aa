// SPDX-License-Identifier: MIT

//go:build !race

package netstack

const raceEnabled = false
