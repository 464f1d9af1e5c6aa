// SPDX-License-Identifier: MIT

//go:build linux || darwin

package wasm

import (
	"sync"

	"golang.org/x/sys/unix"
)

// mappedMemory is a module's linear memory in an address range of its own, reserved once
// for as much as the module may ever have (its maximum, bounded by the limit) and made
// accessible as it grows. Compared with a slice of Go's heap it is never copied when it
// grows, its pages are zero because they are new (nothing clears them) and are only paid for
// once touched, and it adds nothing to the heap the garbage collector paces itself by: a
// Go-built guest's 3-4 MB memory made a start's heap allocations half as large again, and
// its collections with them (docs/performance.md, "WASM starts"). The reservation beyond
// the memory's current size stays PROT_NONE, so an access past it faults instead of reading
// anything else of fledge's.
//
// Free unmaps it. wazero frees a module's memory only once no guest code of it runs (a
// close from outside is completed by the calling goroutine when it leaves guest code), and
// fledge's host functions copy what they read out of it (abi.go read, output), so no
// slice of it is used after Free.
type mappedMemory struct {
	m         *memLimit
	mu        sync.Mutex // Free may come from another goroutine than Reallocate's
	region    []byte     // the whole reservation, as unix.Mmap returned it
	committed int        // bytes of region made readable and writable
}

// newMappedMemory reserves reserve bytes (rounded up to pages), or returns nil when the
// platform refuses (the caller then uses Go's heap).
func newMappedMemory(m *memLimit, reserve uint64) *mappedMemory {
	page := uint64(unix.Getpagesize())
	reserve = (reserve + page - 1) / page * page
	if reserve == 0 || reserve > 1<<40 {
		return nil
	}
	region, err := unix.Mmap(-1, 0, int(reserve), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	hugePages(region)
	return &mappedMemory{m: m, region: region}
}

func (l *mappedMemory) Reallocate(size uint64) []byte {
	if !l.m.grant(size) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.region == nil || size > uint64(len(l.region)) {
		return nil
	}
	if int(size) > l.committed {
		// Made accessible geometrically, as the heap memory grows, so a guest growing page
		// by page costs few system calls; pages cost nothing until touched.
		next := max(int(size), min(2*l.committed, len(l.region)))
		next = min((next+commitUnit-1)/commitUnit*commitUnit, len(l.region))
		if err := unix.Mprotect(l.region[l.committed:next], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil // the system refused the memory: the grow fails, as for any allocator
		}
		l.committed = next
	}
	return l.region[:size:size]
}

func (l *mappedMemory) Free() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.region != nil {
		_ = unix.Munmap(l.region)
		l.region = nil
	}
}
