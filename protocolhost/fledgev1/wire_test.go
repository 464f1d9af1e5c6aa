// SPDX-License-Identifier: MIT

package fledgev1

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fledgehq/fledge/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// encodedLen is the size of s as a JSON string body, the way the protocol writer encodes it.
func encodedLen(t testing.TB, s string) int {
	line, err := protocol.Encode(map[string]string{"s": s})
	require.NoError(t, err)
	return len(line) - len(`{"s":""}`+"\n")
}

func TestWireString(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		budget int
		want   string
		cut    bool
	}{
		{"fits", "hello", 5, "hello", false},
		{"plain cut", "hello", 3, "hel", true},
		{"nul is six", "\x00\x00", 11, "\x00", true},
		{"newline is two", "a\nb", 3, "a\n", true},
		{"quote is two", `a"b`, 4, `a"b`, false},
		{"utf8 kept whole", "aé", 2, "a", true},
		{"invalid byte is six", "a\xffb", 7, "a\xff", true},
		{"line separator is six", "\u2028x", 6, "\u2028", true},
		{"html not escaped", "<&>", 3, "<&>", false},
		{"empty", "", 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := wireString([]byte(tc.in), tc.budget)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.cut, cut)
			assert.LessOrEqual(t, encodedLen(t, got), tc.budget)
		})
	}
}

// The reply of 10 MiB of NUL bytes (the default cap) stays within the cap on the wire.
func TestWireStringBinaryOutput(t *testing.T) {
	const budget = 10 << 20
	got, cut := wireString(make([]byte, budget), budget)
	assert.True(t, cut)
	assert.LessOrEqual(t, encodedLen(t, got), budget)
	assert.Greater(t, encodedLen(t, got), budget-6)
}

func FuzzWireString(f *testing.F) {
	f.Add([]byte("plain text\n"), 8)
	f.Add([]byte("\x00\x1b[2J\xff\xfe\u2028\"\\"), 13)
	f.Fuzz(func(t *testing.T, b []byte, budget int) {
		if budget < 0 || budget > 1<<16 {
			return
		}
		got, cut := wireString(b, budget)
		n := encodedLen(t, got)
		if n > budget {
			t.Fatalf("%q encodes to %d bytes, budget %d", got, n, budget)
		}
		if !strings.HasPrefix(string(b), got) {
			t.Fatalf("%q is not a prefix of the input", got)
		}
		if cut == (len(got) == len(b)) {
			t.Fatalf("cut=%v but kept %d of %d bytes", cut, len(got), len(b))
		}
		if !cut && n != encodedLen(t, string(b)) {
			t.Fatal("uncut string changed")
		}
		// A cut never splits a valid character, and the exact cost makes the cut maximal:
		// the next character would not have fitted.
		if cut {
			rest := b[len(got):]
			_, size := utf8.DecodeRune(rest)
			if encodedLen(t, string(b[:len(got)+size])) <= budget {
				t.Fatalf("cut too early: %q fits in %d", b[:len(got)+size], budget)
			}
		}
	})
}

// wireString is wireCut as the kept string.
func wireString(b []byte, budget int) (string, bool) {
	n, cut := wireCut(b, budget)
	return string(b[:n]), cut
}
