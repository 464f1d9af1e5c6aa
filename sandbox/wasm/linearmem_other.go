// SPDX-License-Identifier: MIT

//go:build !linux && !darwin

package wasm

import "github.com/fledgehq/fledge/third_party/wazero/experimental"

// newMappedMemory: elsewhere a module's memory is a slice of Go's heap (heapMemory).
func newMappedMemory(*memLimit, uint64) experimental.LinearMemory { return nil }
