// SPDX-License-Identifier: MIT

package wasm

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync/atomic"
)

// merges counts mergeData calls, for tests.
var merges atomic.Int64

// Go's linker writes a module's initial memory as one data segment per run of non-zero bytes:
// the test guest has 41,170 of them for 1 MB of data. wazero decodes each one's offset
// expression when it compiles the module and evaluates it again at every instantiation
// (about 3 ms of each start of that guest). mergeData joins segments that are close together,
// filling the gaps with zeros, before the module is compiled: a new instance's memory is
// all zeros, and the segments are applied in order, so the memory the instance starts with
// is byte for byte the same (TestMergedDataInitialisesTheSameMemory). The audit record and
// the cache key stay the sha256 of the bytes on disk; only what is compiled is merged.

// mergeVersion names what mergeData makes of a module. The compiled module is found by the
// module's sha256 and this (compileKey), not by a hash of the merged bytes: it must change
// whenever mergeData's output for some module changes (TestMergeDataOutputIsVersioned
// fails until it does).
const mergeVersion = "fledge mergeData 1"

const (
	// mergeGap is the largest gap between two segments that is filled to join them.
	mergeGap = 4096
	// mergeMinSegments: a module with fewer segments is compiled as it is.
	mergeMinSegments = 64
)

// dataSegment is one segment: its address and where its bytes are in the section body
// (no pointers: sorting tens of thousands of them stays cheap).
type dataSegment struct {
	off    uint64
	pos, n uint32
}

// mergeData returns bin with its data segments merged, or bin itself when the module does
// not qualify: anything but active segments of memory 0 at i32.const offsets that do not
// overlap, or a data count section (bulk memory instructions name segments by
// index), or anything malformed (left for wazero to refuse). The zeros added are bounded by
// half the module's size.
func mergeData(bin []byte) []byte {
	merges.Add(1)
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return bin
	}
	dataStart, dataEnd := -1, -1
	var body []byte
	for i := 8; i < len(bin); {
		start := i
		id := bin[i]
		size, n := binary.Uvarint(bin[i+1:])
		if n <= 0 || size > uint64(len(bin)-(i+1+n)) {
			return bin
		}
		i += 1 + n + int(size)
		switch id {
		case 12: // data count
			return bin
		case 11:
			if dataStart >= 0 {
				return bin
			}
			dataStart, dataEnd = start, i
			body = bin[start+1+n : i]
		}
	}
	if dataStart < 0 {
		return bin
	}
	segs, ok := parseSegments(body)
	if !ok || len(segs) < mergeMinSegments {
		return bin
	}
	// Group the segments: each group becomes one segment from its first's address to its
	// last's end, the gaps between them left as the zeros make gives.
	type group struct {
		off, end uint64
		first    int
	}
	budget := uint64(len(bin) / 2)
	groups := make([]group, 0, 16)
	for i, sg := range segs {
		end := sg.off + uint64(sg.n)
		if k := len(groups); k > 0 {
			g := &groups[k-1]
			if gap := sg.off - g.end; gap <= mergeGap && gap <= budget {
				budget -= gap
				g.end = end
				continue
			}
		}
		groups = append(groups, group{off: sg.off, end: end, first: i})
	}
	if len(groups) == len(segs) {
		return bin
	}
	bodyLen := uvarintLen(uint64(len(groups)))
	for _, g := range groups {
		bodyLen += 2 + len(appendSleb(nil, int64(int32(uint32(g.off))))) + 1 + uvarintLen(g.end-g.off) + int(g.end-g.off)
	}
	out := make([]byte, 0, dataStart+1+uvarintLen(uint64(bodyLen))+bodyLen+len(bin)-dataEnd)
	out = append(out, bin[:dataStart]...)
	out = append(out, 11)
	out = binary.AppendUvarint(out, uint64(bodyLen))
	out = binary.AppendUvarint(out, uint64(len(groups)))
	for gi, g := range groups {
		out = append(out, 0x00, 0x41) // active, memory 0; i32.const
		out = appendSleb(out, int64(int32(uint32(g.off))))
		out = append(out, 0x0b)
		out = binary.AppendUvarint(out, g.end-g.off)
		base := len(out)
		out = out[:base+int(g.end-g.off)] // within capacity; make zeroed it
		last := len(segs)
		if gi+1 < len(groups) {
			last = groups[gi+1].first
		}
		for _, sg := range segs[g.first:last] {
			copy(out[base+int(sg.off-g.off):], body[sg.pos:sg.pos+sg.n])
		}
	}
	return append(out, bin[dataEnd:]...)
}

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

// parseSegments reads a data section's segments, sorted by address, if every one is active
// in memory 0 at an i32.const offset, within 32-bit addresses, and none overlaps another.
func parseSegments(body []byte) ([]dataSegment, bool) {
	count, n := binary.Uvarint(body)
	if n <= 0 || count > uint64(len(body)) {
		return nil, false
	}
	i := n
	segs := make([]dataSegment, 0, count)
	for range count {
		if i+2 > len(body) || body[i] != 0x00 || body[i+1] != 0x41 {
			return nil, false
		}
		v, m := readSleb32(body[i+2:])
		if m <= 0 || i+2+m >= len(body) || body[i+2+m] != 0x0b {
			return nil, false
		}
		i += 2 + m + 1
		l, m := binary.Uvarint(body[i:])
		if m <= 0 || l > uint64(len(body)-(i+m)) {
			return nil, false
		}
		i += m
		off := uint64(uint32(v))
		if off+l > 1<<32 {
			return nil, false
		}
		segs = append(segs, dataSegment{off: off, pos: uint32(i), n: uint32(l)})
		i += int(l)
	}
	if i != len(body) {
		return nil, false
	}
	// Segments that do not overlap write the same memory in any order: sort them by address
	// (Go's linker writes each of its data sections in turn).
	segs = sortSegments(segs)
	var end uint64
	for _, s := range segs {
		if s.off < end {
			return nil, false
		}
		end = s.off + uint64(s.n)
	}
	return segs, true
}

// sortSegments sorts segments by address. Go's linker writes a few ascending runs (one per
// data section), which are merged in one pass; anything else is sorted.
func sortSegments(segs []dataSegment) []dataSegment {
	starts := []int{0}
	for i := 1; i < len(segs); i++ {
		if segs[i].off < segs[i-1].off {
			if starts = append(starts, i); len(starts) > maxRuns {
				slices.SortFunc(segs, func(a, b dataSegment) int { return cmp.Compare(a.off, b.off) })
				return segs
			}
		}
	}
	if len(starts) == 1 {
		return segs
	}
	ends := append(starts[1:len(starts):len(starts)], len(segs))
	next := slices.Clone(starts)
	out := make([]dataSegment, 0, len(segs))
	for len(out) < len(segs) {
		best := -1
		for r := range next {
			if next[r] < ends[r] && (best < 0 || segs[next[r]].off < segs[next[best]].off) {
				best = r
			}
		}
		out = append(out, segs[next[best]])
		next[best]++
	}
	return out
}

// maxRuns: with more ascending runs than this, sortSegments sorts instead of merging.
const maxRuns = 16

// readSleb32 decodes a signed LEB128 of at most 5 bytes (an i32.const immediate).
func readSleb32(b []byte) (int32, int) {
	var r int64
	var shift uint
	for i := 0; i < len(b) && i < 5; i++ {
		c := b[i]
		r |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				r |= -1 << shift
			}
			if r < -1<<31 || r > 1<<31-1 {
				return 0, -1
			}
			return int32(r), i + 1
		}
	}
	return 0, -1
}

func appendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
