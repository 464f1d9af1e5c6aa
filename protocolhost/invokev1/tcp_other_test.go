// SPDX-License-Identifier: MIT

//go:build !linux

package invokev1

// Only Linux gives a plugin a network namespace of its own; elsewhere nothing to add.
var platformTCPRefusedCases []tcpRefusedCase
