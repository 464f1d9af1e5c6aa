// SPDX-License-Identifier: MIT

//go:build !linux

package wasm

// Elsewhere every new process hashes the module (the copy is compared through a mapping,
// kept to Linux as the rest of the cache dir's mappings are).
const keptCopySupported = false

func keptDigest(string, string, []byte) (string, bool) { return "", false }
