// SPDX-License-Identifier: MIT

//go:build linux || darwin

package wasm

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestMappedMemoryGrowsInPlace: a module's memory outside Go's heap keeps its address and
// its bytes as it grows, every new byte is zero, and the limit still refuses (and is
// recorded as the memory bound).
func TestMappedMemoryGrowsInPlace(t *testing.T) {
	const limit = 8 << 20
	lim := &memLimit{limit: limit}
	mem, ok := lim.Allocate(64<<10, 1<<32).(*mappedMemory)
	if !ok {
		t.Fatal("the memory is not mapped outside the heap")
	}
	defer mem.Free()
	b := mem.Reallocate(64 << 10)
	if len(b) != 64<<10 {
		t.Fatalf("len %d", len(b))
	}
	for i := range b {
		b[i] = byte(i)
	}
	base := unsafe.SliceData(b)
	prev := uint64(len(b))
	for _, size := range []uint64{128 << 10, 3 << 20, limit} {
		g := mem.Reallocate(size)
		if uint64(len(g)) != size || unsafe.SliceData(g) != base {
			t.Fatalf("grow to %d: len %d, moved %v", size, len(g), unsafe.SliceData(g) != base)
		}
		for i := range 64 << 10 {
			if g[i] != byte(i) {
				t.Fatalf("byte %d changed by the grow to %d", i, size)
			}
		}
		if !bytes.Equal(g[prev:], make([]byte, size-prev)) {
			t.Fatalf("grow to %d: new bytes are not zero", size)
		}
		g[len(g)-1] = 1 // writable to its end
		prev = size
	}
	if mem.Reallocate(limit+65536) != nil || !lim.refused.Load() {
		t.Fatal("a grow past the limit was not refused")
	}
	if lim.peak.Load() != limit {
		t.Fatalf("peak %d", lim.peak.Load())
	}
	mem.Free()
	if mem.Reallocate(64<<10) != nil {
		t.Fatal("a freed memory grew again")
	}
}
