// SPDX-License-Identifier: MIT

package capbuf

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBuffer(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		writes    []string
		want      string
		truncated bool
		total     int64
	}{
		{"under", 10, []string{"abc", "de"}, "abcde", false, 5},
		{"exact", 5, []string{"abc", "de"}, "abcde", false, 5},
		{"split write", 4, []string{"abc", "de"}, "abcd", true, 5},
		{"after full", 3, []string{"abc", "de", "f"}, "abc", true, 6},
		{"zero cap", 0, []string{"x"}, "", true, 1},
		{"empty writes", 2, []string{"", ""}, "", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(tt.max)
			for _, w := range tt.writes {
				n, err := b.Write([]byte(w))
				assert.NoError(t, err)
				assert.Equal(t, len(w), n, "writes must always report full length so pipes keep draining")
			}
			assert.Equal(t, tt.want, string(b.Bytes()))
			assert.Equal(t, tt.truncated, b.Truncated())
			assert.Equal(t, tt.total, b.Total())
		})
	}
}

func TestBufferLarge(t *testing.T) {
	b := New(1 << 10)
	chunk := []byte(strings.Repeat("x", 4096))
	for i := 0; i < 1000; i++ {
		_, _ = b.Write(chunk)
	}
	assert.Len(t, b.Bytes(), 1<<10)
	assert.True(t, b.Truncated())
	assert.EqualValues(t, 4096*1000, b.Total())
}

// Filling the buffer allocates less than three times the cap (doubling, clamped at max), and
// the kept bytes never sit in more than max bytes of capacity.
func TestBufferGrowthBounded(t *testing.T) {
	const max = 10 << 20
	chunk := make([]byte, 32<<10)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b := New(max)
	for i := 0; i < 2*max/len(chunk); i++ {
		_, _ = b.Write(chunk)
	}
	runtime.ReadMemStats(&after)
	assert.Equal(t, max, cap(b.Bytes()))
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(3*max), "allocated for a %d-byte cap (append growth takes about 4.5x)", max)
}
