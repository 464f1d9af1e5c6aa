// SPDX-License-Identifier: MIT

//go:build !unix

package protocolhost

// outputBroken: without SIGPIPE, a closed output is only a failed write.
func outputBroken() bool { return false }
