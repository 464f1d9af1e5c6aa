// SPDX-License-Identifier: MIT

package audit

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrBadSince says a --since value is none of the accepted forms.
var ErrBadSince = errors.New("audit: --since wants a duration (1h30m), an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02)")

// sinceLayouts are the absolute forms ParseSince accepts, most precise first. A time without
// a zone is UTC, as the table shows times in UTC.
var sinceLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05",
	"2006-01-02 15:04:05",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

// ParseSince reads a --since value: a positive Go duration counted back from now (what it
// always accepted: 90s, 30m, 1h30m), an RFC 3339 time, a UTC date-time without zone, or a
// date (UTC midnight).
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%w: %q is not a positive duration", ErrBadSince, s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range sinceLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w, not %q", ErrBadSince, s)
}
