// SPDX-License-Identifier: MIT

//go:build !linux

package wasm

// Elsewhere a module's data is merged in each process (a mapped entry is Linux only, as is
// wazero's mapped machine code).
const mergedCacheSupported = false

func loadMerged(string, [32]byte) ([]byte, func(), bool) { return nil, nil, false }
