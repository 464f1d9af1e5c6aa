// SPDX-License-Identifier: MIT

// Package capbuf is a write-capped buffer: it keeps the first Max bytes, keeps accepting
// (and discarding) the rest so the writer never blocks or fails, and remembers that it cut.
package capbuf

import "sync"

// Buffer keeps at most Max bytes. Safe for concurrent use.
type Buffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	total     int64
	truncated bool
}

// New returns a buffer that keeps at most max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

// Write never fails: past the cap, bytes are counted and dropped.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	room := b.max - len(b.buf)
	if room <= 0 {
		if len(p) > 0 {
			b.truncated = true
		}
		return len(p), nil
	}
	if len(p) > room {
		b.buf = b.appendCapped(p[:room])
		b.truncated = true
		return len(p), nil
	}
	b.buf = b.appendCapped(p)
	return len(p), nil
}

// appendCapped appends p, growing by doubling but never past max. append's own growth
// (1.25x for large slices) would leave about four times the cap in garbage on the way to a
// full 10 MiB buffer; doubling leaves at most the cap, and the last step lands on max.
func (b *Buffer) appendCapped(p []byte) []byte {
	need := len(b.buf) + len(p)
	if need > cap(b.buf) {
		c := min(b.max, max(2*cap(b.buf), need, 4096))
		grown := make([]byte, len(b.buf), c)
		copy(grown, b.buf)
		b.buf = grown
	}
	return append(b.buf, p...)
}

// Bytes returns the kept bytes.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf
}

// Truncated reports whether anything was dropped.
func (b *Buffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.truncated
}

// Total is every byte written, kept or not.
func (b *Buffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}
