// SPDX-License-Identifier: MIT

package audit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                          {},
		"90s":                       now.Add(-90 * time.Second),
		"1h30m":                     now.Add(-90 * time.Minute),
		"2026-11-20":                time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC),
		"2026-11-20T10:11:12Z":      time.Date(2026, 11, 20, 10, 11, 12, 0, time.UTC),
		"2026-11-20T10:11:12.5Z":    time.Date(2026, 11, 20, 10, 11, 12, 5e8, time.UTC),
		"2026-11-20T10:11:12+02:00": time.Date(2026, 11, 20, 8, 11, 12, 0, time.UTC),
		"2026-11-20 10:11":          time.Date(2026, 11, 20, 10, 11, 0, 0, time.UTC),
		"2026-11-20T10:11:12":       time.Date(2026, 11, 20, 10, 11, 12, 0, time.UTC),
	} {
		got, err := ParseSince(in, now)
		require.NoError(t, err, in)
		assert.True(t, want.Equal(got), "%q: got %s, want %s", in, got, want)
	}
	for _, bad := range []string{"yesterday", "-1h", "0s", "2026-13-01", "20261120", "1d"} {
		_, err := ParseSince(bad, now)
		assert.ErrorIs(t, err, ErrBadSince, bad)
	}
}
