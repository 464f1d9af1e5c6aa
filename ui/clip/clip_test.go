// SPDX-License-Identifier: MIT

package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBytesNeverSplitsARune(t *testing.T) {
	s := strings.Repeat("é", 50) // two bytes each
	for n := 0; n <= len(s)+1; n++ {
		got := Bytes(s, n)
		if !utf8.ValidString(got) {
			t.Fatalf("Bytes(%d) split a rune: %q", n, got)
		}
		if n < len(s) && (len(got) > n+len(Ellipsis) || !strings.HasSuffix(got, Ellipsis)) {
			t.Fatalf("Bytes(%d) = %q: over the bound or unmarked", n, got)
		}
	}
	if Bytes("short", 80) != "short" {
		t.Fatal("a string within the bound changed")
	}
}

func TestRunesCountsCharacters(t *testing.T) {
	if got := Runes("日本語テキスト", 4); got != "日本語…" {
		t.Fatalf("Runes = %q", got)
	}
	if got := Runes("abc", 3); got != "abc" {
		t.Fatalf("Runes = %q", got)
	}
	if got := Runes("abcd", 0); got != "" {
		t.Fatalf("Runes(0) = %q", got)
	}
}

func FuzzClip(f *testing.F) {
	f.Add("héllo wörld", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		p := Prefix(s, n)
		if len(p) > n || !strings.HasPrefix(s, p) {
			t.Fatalf("Prefix(%q, %d) = %q", s, n, p)
		}
		if utf8.ValidString(s) && !utf8.ValidString(p) {
			t.Fatalf("Prefix split a rune: %q", p)
		}
		if r := Runes(s, n); utf8.ValidString(s) && utf8.RuneCountInString(r) > max(n, 0) {
			t.Fatalf("Runes(%q, %d) = %q", s, n, r)
		}
	})
}
