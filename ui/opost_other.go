// SPDX-License-Identifier: MIT

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package ui

func keepOutputProcessing(int) error { return nil }
