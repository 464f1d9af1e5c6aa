// SPDX-License-Identifier: MIT

package report

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Controls are shown, not applied; a long string is clipped with its length; the writer's
// own truncation mark (the original length) survives the page's clipping.
func TestVisibleAndClip(t *testing.T) {
	assert.Equal(t, "a␛[31mb␊c⟦U+202E⟧d⟦U+2066⟧⟦U+200B⟧\ufffd", Visible("a\x1b[31mb\nc\u202ed\u2066\u200b\xff"))
	assert.Equal(t, "<script>", Visible("<script>"), "HTML escaping is the template's and textContent's")
	big := strings.Repeat("é", 600_000)
	c := Clip(big, 100)
	assert.True(t, strings.HasSuffix(c, "…[clipped: 1200000 bytes]"), c)
	assert.Len(t, strings.TrimSuffix(c, "…[clipped: 1200000 bytes]"), 100)
	mark := "…[truncated: 1000079 bytes, sha256 " + strings.Repeat("ab", 32) + "]"
	c = Clip(strings.Repeat("A", 4096)+mark, 200)
	assert.True(t, strings.HasSuffix(c, "…[clipped: 4096 bytes]"+mark), c)
}
