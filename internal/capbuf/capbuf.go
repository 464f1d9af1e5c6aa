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
		b.buf = append(b.buf, p[:room]...)
		b.truncated = true
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
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
