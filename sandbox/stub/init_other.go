// SPDX-License-Identifier: MIT

//go:build !linux

package stub

import "errors"

// ProbeMarker is argv[1] of the user-namespace probe (Linux only).
const ProbeMarker = "__fledge_sandbox_userns_probe__"

func runInit(string, *Policy) error {
	return &StepError{Step: "init", Msg: errors.New("an init stub exists only on Linux").Error()}
}

func runProbe() int { return 2 }
