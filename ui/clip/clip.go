// SPDX-License-Identifier: MIT

// Package clip cuts text to a bound without splitting a character: the one rule for every
// string fledge shortens (plugin text quoted in messages, values in records, error details).
// It imports nothing of fledge, so the audit log, the SDK and the UI all use it.
package clip

import "unicode/utf8"

// Ellipsis marks a cut in text meant for a person.
const Ellipsis = "..."

// Bytes cuts s to at most n bytes on a rune boundary and marks the cut with "...".
func Bytes(s string, n int) string { return Mark(s, n, Ellipsis) }

// Mark cuts s to at most n bytes on a rune boundary and appends mark when it cut.
func Mark(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	return Prefix(s, n) + mark
}

// Prefix is the longest prefix of s of at most n bytes that ends on a rune boundary, with no
// mark: for values whose length is recorded beside them.
func Prefix(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Runes cuts s to at most n runes, the last of them "…" when it cut: for columns measured in
// characters.
func Runes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	i, count := 0, 0
	for i < len(s) && count < n-1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		count++
	}
	return s[:i] + "…"
}
