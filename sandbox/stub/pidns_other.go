// SPDX-License-Identifier: MIT

//go:build !linux

package stub

// PidNSMarker is argv[1] of the pid-namespace holder (Linux only).
const PidNSMarker = "__fledge_sandbox_pidns__"

func isPidNS([]string) bool { return false }

func runPidNS() int { return 2 }
