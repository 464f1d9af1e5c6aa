// SPDX-License-Identifier: MIT

package egress

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStreamCheckerFollowsFraming(t *testing.T) {
	ok := "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n" +
		"POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /c HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nGET /\r\n0\r\nX-T: 1\r\n\r\n" +
		"GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x05hello\x00\xff"
	for _, step := range []int{1, 3, 7, len(ok)} {
		var s StreamChecker
		var err error
		for i := 0; i < len(ok) && err == nil; i += step {
			err = s.Feed([]byte(ok[i:min(i+step, len(ok))]))
		}
		assert.NoError(t, err, "fed %d at a time", step)
		assert.Equal(t, "/ws", s.Last.Target)
	}
	for _, bad := range []string{
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\nX-A: 1\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nabGARBAGE\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n",
	} {
		var s StreamChecker
		err := s.Feed([]byte(bad))
		assert.True(t, errors.Is(err, ErrBadRequest), "%q: %v", strings.ReplaceAll(bad, "\r\n", "|"), err)
	}
}

// A head sent a byte at a time is parsed a bounded number of times, not at every byte.
func TestHeadProgressIsLinear(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: a.test\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("y", 200)+"\r\n", 250) + "\r\n"
	var h HeadProgress
	parses := 0
	for i := 1; i <= len(head); i++ {
		if h.Due([]byte(head[:i]), MaxRequestHead) {
			parses++
		}
	}
	assert.Less(t, parses, 300, "parses of a %d-byte head fed a byte at a time", len(head))
	var s StreamChecker
	for i := 0; i < len(head); i++ {
		assert.NoError(t, s.Feed([]byte{head[i]}))
	}
	assert.Equal(t, "a.test", s.Last.Host)
}
