// SPDX-License-Identifier: MIT

package wasm_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/sandbox/wasm"
)

// withData is a module with an empty _start, memPages of memory and the given data section
// body appended (assemble writes no data section of its own without data).
func withData(memPages uint32, body []byte) []byte {
	return append(assemble(nil, memPages, nil), section(11, body)...)
}

type seg struct {
	off  uint32
	data []byte
}

func activeSegments(segs []seg) []byte {
	b := leb(uint32(len(segs)))
	for _, s := range segs {
		b = append(b, 0x00, 0x41)
		b = append(b, sleb(int32(s.off))...)
		b = append(b, opEnd)
		b = append(b, leb(uint32(len(s.data)))...)
		b = append(b, s.data...)
	}
	return b
}

func sleb(v int32) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

// TestMergedDataInitialisesTheSameMemory: the module fledge compiles (segments merged) starts
// with exactly the memory the module on disk defines, for the Go-built guests (tens of
// thousands of segments, not in address order) and for a synthetic module with segments
// near and far apart.
func TestMergedDataInitialisesTheSameMemory(t *testing.T) {
	var segs []seg
	for i := range 200 {
		off := uint32(i * 40)
		if i >= 150 {
			off = 64<<10 + uint32(i*9000) // gaps over the merge limit
		}
		segs = append(segs, seg{off, []byte{byte(i), 0xff, byte(i >> 8), 1}})
	}
	// The same segments written in three ascending runs (as Go's linker does, one per data
	// section) and in reverse (every segment a run of its own: sorted, not merged).
	runs := append(append(slices.Clone(segs[120:]), segs[40:120]...), segs[:40]...)
	reversed := slices.Clone(segs)
	slices.Reverse(reversed)
	mods := map[string][]byte{
		"synthetic":          withData(40, activeSegments(segs)),
		"synthetic, 3 runs":  withData(40, activeSegments(runs)),
		"synthetic, reverse": withData(40, activeSegments(reversed)),
	}
	for _, g := range []string{"benchguest", "probe", "hostfn"} {
		b, err := os.ReadFile(guest(t, g))
		require.NoError(t, err)
		mods[g] = b
	}
	for name, bin := range mods {
		t.Run(name, func(t *testing.T) {
			merged := wasm.MergeData(bin)
			require.False(t, bytes.Equal(bin, merged), "merged")
			want, err := wasm.InitialMemory(bin)
			require.NoError(t, err)
			got, err := wasm.InitialMemory(merged)
			require.NoError(t, err)
			require.Equal(t, len(want), len(got))
			assert.True(t, bytes.Equal(want, got), "the same initial memory")
		})
	}
}

// TestMergeDataLeavesOtherModulesAlone: a module it cannot prove the merge right for is
// compiled as it is.
func TestMergeDataLeavesOtherModulesAlone(t *testing.T) {
	many := func(mod func(i int, s *seg)) []seg {
		var segs []seg
		for i := range 100 {
			s := seg{uint32(i * 8), []byte{1, 2}}
			if mod != nil {
				mod(i, &s)
			}
			segs = append(segs, s)
		}
		return segs
	}
	for name, bin := range map[string][]byte{
		"few segments":              withData(1, activeSegments(many(nil)[:10])),
		"overlapping":               withData(1, activeSegments(many(func(i int, s *seg) { s.off = uint32(i) }))),
		"out of order, overlapping": withData(1, activeSegments(many(func(i int, s *seg) { s.off = uint32(800 - i) }))),
		"data count":                append(withData(1, activeSegments(many(nil))), section(12, []byte{100})...),
		"truncated":                 withData(1, activeSegments(many(nil))[:300]),
		"not a wasm":                []byte("#!/bin/sh\necho hi\n"),
		"global offset":             withData(1, append(leb(64), bytes.Repeat([]byte{0x00, 0x23, 0x00, opEnd, 1, 7}, 64)...)),
		"memory index 1":            withData(1, append(leb(64), bytes.Repeat([]byte{0x02, 0x01, 0x41, 0x00, opEnd, 1, 7}, 64)...)),
		"passive segments":          withData(1, append(leb(64), bytes.Repeat([]byte{0x01, 1, 7}, 64)...)),
	} {
		assert.True(t, bytes.Equal(bin, wasm.MergeData(bin)), name)
	}
}

// TestMergeDataOutputIsVersioned: what mergeData makes of a module with segments near and
// far apart, out of order, is fixed for its version. The compiled module is found by the
// module's sha256 and mergeData's version (compileKey), so a change to the output must come
// with a new mergeVersion; then record the new sum here.
func TestMergeDataOutputIsVersioned(t *testing.T) {
	var segs []seg
	for i := range 200 {
		segs = append(segs, seg{uint32((i * 37) % 200 * 24), []byte{byte(i), 2, 3}})
	}
	segs = append(segs, seg{60000, []byte{9}}, seg{9000, bytes.Repeat([]byte{7}, 100)})
	bin := withData(2, activeSegments(segs))
	merged := wasm.MergeData(bin)
	require.False(t, bytes.Equal(bin, merged), "the module is merged")
	sum := sha256.Sum256(merged)
	const want = "fledge mergeData 1: "
	assert.Equal(t, want+recordedMergeSum, wasm.MergeVersion+": "+hex.EncodeToString(sum[:]),
		"mergeData's output changed: give it a new mergeVersion (datamerge.go) and record the new sum")
}

const recordedMergeSum = "e91c2e8759be51cb697157459bbfebf54a86329bcfd0ed5c98910af4b5175ea2"
