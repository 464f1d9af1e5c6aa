// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSessions: interleaved sessions are summed per session, ordered by start, with the
// plugin, the counts per decision and whether plugin_exit ended them.
func TestSessions(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	add := func(session, plugin, event string, d Decision) {
		r := &Record{Session: session, Event: event, Decision: d, Reason: "ok"}
		if plugin != "" {
			r.Plugin = &PluginRef{Name: plugin, Version: "1.0.0"}
		}
		require.NoError(t, l.Append(r, false))
	}
	add("aaaaaaaaaaaaaaaa", "hello", EventPluginStart, Allow)
	add("bbbbbbbbbbbbbbbb", "other", EventPluginStart, Allow)
	add("aaaaaaaaaaaaaaaa", "hello", EventExecDecision, Deny)
	add("", "", EventLogRecovered, Error) // outside any session
	add("bbbbbbbbbbbbbbbb", "other", EventExecOutcome, Error)
	add("aaaaaaaaaaaaaaaa", "hello", EventPluginExit, Allow)

	rep, err := Sessions(path, Filter{})
	require.NoError(t, err)
	require.Len(t, rep.Sessions, 2)
	a, b := rep.Sessions[0], rep.Sessions[1]
	assert.Equal(t, "aaaaaaaaaaaaaaaa", a.ID)
	assert.Equal(t, "hello", a.Plugin)
	assert.Equal(t, [4]int{3, 2, 1, 0}, [4]int{a.Records, a.Allow, a.Deny, a.Error})
	assert.True(t, a.Ended)
	assert.Equal(t, uint64(1), a.FirstSeq)
	assert.Equal(t, uint64(6), a.LastSeq)
	assert.Equal(t, [4]int{2, 1, 0, 1}, [4]int{b.Records, b.Allow, b.Deny, b.Error})
	assert.False(t, b.Ended)

	rep, err = Sessions(path, Filter{Plugin: "other"})
	require.NoError(t, err)
	require.Len(t, rep.Sessions, 1)

	var tb bytes.Buffer
	require.NoError(t, WriteSessionsTable(&tb, rep.Sessions))
	lines := strings.Split(strings.TrimSpace(tb.String()), "\n")
	require.Len(t, lines, 2)
	assert.Regexp(t, `^bbbbbbbbbbbbbbbb  other@1\.0\.0 .* …\s+1\s+0\s+1\s+2$`, lines[1])
	var jb bytes.Buffer
	require.NoError(t, WriteSessionsJSON(&jb, rep.Sessions))
	var m map[string]any
	require.NoError(t, json.Unmarshal(jb.Bytes(), &m))
	assert.Equal(t, "bbbbbbbbbbbbbbbb", m["session"])
	assert.Equal(t, false, m["ended"])
}
