package wasm

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// Go's linker writes a module's initial memory as one data segment per run of non-zero bytes:
// the test guest has 41,170 of them for 1 MB of data. wazero decodes each one's offset
// expression when it compiles the module and evaluates it again at every instantiation
// (about 3 ms of each start of that guest). mergeData joins segments that are close together,
// filling the gaps with zeros, before the module is compiled: a new instance's memory is
// all zeros, and the segments are applied in order, so the memory the instance starts with
// is byte for byte the same (TestMergedDataInitialisesTheSameMemory). The audit record and
// the cache key stay the sha256 of the bytes on disk; only what is compiled is merged.

const (
	// mergeGap is the largest gap between two segments that is filled to join them.
	mergeGap = 4096
	// mergeMinSegments: a module with fewer segments is compiled as it is.
	mergeMinSegments = 64
)

type dataSegment struct {
	off  uint64
	data []byte
}

// mergeData returns bin with its data segments merged, or bin itself when the module does
// not qualify: anything but active segments of memory 0 at i32.const offsets that do not
// overlap, or a data count section (bulk memory instructions name segments by
// index), or anything malformed (left for wazero to refuse). The zeros added are bounded by
// half the module's size.
func mergeData(bin []byte) []byte {
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
	budget := len(bin) / 2
	merged := make([]dataSegment, 0, 16)
	for _, s := range segs {
		if k := len(merged); k > 0 {
			last := &merged[k-1]
			end := last.off + uint64(len(last.data))
			gap := int(s.off - end)
			if s.off >= end && gap <= mergeGap && gap <= budget {
				budget -= gap
				last.data = append(last.data, make([]byte, gap)...)
				last.data = append(last.data, s.data...)
				continue
			}
		}
		merged = append(merged, dataSegment{off: s.off, data: append([]byte(nil), s.data...)})
	}
	if len(merged) == len(segs) {
		return bin
	}
	nb := binary.AppendUvarint(nil, uint64(len(merged)))
	for _, s := range merged {
		nb = append(nb, 0x00, 0x41) // active, memory 0; i32.const
		nb = appendSleb(nb, int64(int32(uint32(s.off))))
		nb = append(nb, 0x0b)
		nb = binary.AppendUvarint(nb, uint64(len(s.data)))
		nb = append(nb, s.data...)
	}
	out := make([]byte, 0, len(bin)+len(nb)-len(body))
	out = append(out, bin[:dataStart]...)
	out = append(out, 11)
	out = binary.AppendUvarint(out, uint64(len(nb)))
	out = append(out, nb...)
	return append(out, bin[dataEnd:]...)
}

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
		segs = append(segs, dataSegment{off: off, data: body[i : i+int(l)]})
		i += int(l)
	}
	if i != len(body) {
		return nil, false
	}
	// Segments that do not overlap write the same memory in any order: sort them by address
	// (Go's linker writes each of its data sections in turn).
	slices.SortStableFunc(segs, func(a, b dataSegment) int { return cmp.Compare(a.off, b.off) })
	var end uint64
	for _, s := range segs {
		if s.off < end {
			return nil, false
		}
		end = s.off + uint64(len(s.data))
	}
	return segs, true
}

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
