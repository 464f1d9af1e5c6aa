// SPDX-License-Identifier: MIT

package fledgev1

import (
	"unicode/utf8"

	"github.com/fledgehq/fledge/protocol"
)

// maxStreamWire bounds one exec stream as it is encoded in the reply, whatever OutputCap
// says (policy allows up to 1 GiB): both streams plus the envelope must fit one protocol
// line, or the reply could not be sent at all and the plugin would wait for it forever.
const maxStreamWire = (protocol.DefaultMaxWriteLine - 64<<10) / 2

// wireCut is how much of captured output goes into the reply: the longest prefix that
// JSON-encodes to at most budget bytes, cut at a character boundary; cut reports whether
// anything was dropped. OutputCap counts raw bytes, but JSON escaping grows a control byte
// to six (\u0000), so 10 MiB of binary output would otherwise become a 60 MiB line: the
// budget keeps the host's memory and the line bounded by the cap, not by six times it.
// Costs follow encoding/json with HTML escaping off (what protocol.Writer uses).
func wireCut(b []byte, budget int) (n int, cut bool) {
	cost := 0
	for i := 0; i < len(b); {
		c := b[i]
		n, w := 1, 1
		switch {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n = 2
		case c < 0x20:
			n = 6 // \u00XX
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			w = size
			switch {
			case r == utf8.RuneError && size == 1:
				n = 6 // invalid byte -> \ufffd
			case r == '\u2028' || r == '\u2029':
				n = 6
			default:
				n = size
			}
		}
		if cost+n > budget {
			return i, true
		}
		cost += n
		i += w
	}
	return len(b), false
}
