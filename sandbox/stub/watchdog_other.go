// SPDX-License-Identifier: MIT

//go:build !linux

package stub

// WatchdogMarker is argv[1] of the host-death watchdog (Linux only).
const WatchdogMarker = "__fledge_sandbox_watchdog__"

func isWatchdog([]string) bool { return false }

func runWatchdog([]string) int { return 2 }
