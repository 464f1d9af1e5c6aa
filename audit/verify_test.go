// SPDX-License-Identifier: MIT

package audit

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rehash re-seals an edited line with a correct hash of its own, as a forger would.
func rehash(t *testing.T, line []byte) []byte {
	t.Helper()
	r, err := decodeRecord(bytes.TrimSuffix(line, []byte("\n")))
	require.NoError(t, err)
	b, err := body(r)
	require.NoError(t, err)
	return append(withHash(b, hashOf(b)), '\n')
}

func TestVerifyBreakKinds(t *testing.T) {
	edit := func(l []byte) []byte {
		return bytes.Replace(l, []byte(`"decision":"allow"`), []byte(`"decision":"deny"`), 1)
	}
	tests := []struct {
		name    string
		mutate  func(t *testing.T, lines [][]byte) [][]byte // lines[10] is the empty remainder
		kind    BreakKind                                   // "" = verifies
		line    int
		seq     uint64
		records int
	}{
		{"intact", func(t *testing.T, ls [][]byte) [][]byte { return ls }, "", 0, 0, 10},
		{"edit a field", func(t *testing.T, ls [][]byte) [][]byte {
			ls[4] = edit(ls[4])
			return ls
		}, BreakEdited, 5, 5, 4},
		{"edit the hash", func(t *testing.T, ls [][]byte) [][]byte {
			ls[4] = bytes.Replace(ls[4], []byte(`"hash":"`), []byte(`"hash":"0`), 1)
			ls[4] = append(ls[4][:len(ls[4])-4], "\"}\n"...)
			return ls
		}, BreakEdited, 5, 5, 4},
		{"edit and re-hash", func(t *testing.T, ls [][]byte) [][]byte {
			ls[4] = rehash(t, edit(ls[4]))
			return ls
		}, BreakChainMismatch, 6, 6, 5},
		{"non-canonical line with a valid hash", func(t *testing.T, ls [][]byte) [][]byte {
			l := bytes.Replace(ls[4], []byte(`"seq":5,`), []byte(`"seq": 5,`), 1)
			l = bytes.TrimSuffix(l, []byte("\n"))
			b := append(append([]byte{}, l[:len(l)-hashTailLen]...), '}')
			ls[4] = append(withHash(b, hashOf(b)), '\n')
			return ls
		}, BreakEdited, 5, 5, 4},
		{"delete a line", func(t *testing.T, ls [][]byte) [][]byte {
			return append(ls[:4], ls[5:]...)
		}, BreakDeleted, 5, 6, 4},
		{"delete two lines", func(t *testing.T, ls [][]byte) [][]byte {
			return append(ls[:4], ls[6:]...)
		}, BreakDeleted, 5, 7, 4},
		{"delete the first line", func(t *testing.T, ls [][]byte) [][]byte {
			return ls[1:]
		}, BreakDeleted, 1, 2, 0},
		{"swap two lines", func(t *testing.T, ls [][]byte) [][]byte {
			ls[4], ls[5] = ls[5], ls[4]
			return ls
		}, BreakReordered, 5, 6, 4},
		{"move a line to the end", func(t *testing.T, ls [][]byte) [][]byte {
			moved := ls[2]
			out := append(append([][]byte{}, ls[:2]...), ls[3:10]...)
			return append(out, moved)
		}, BreakReordered, 3, 4, 2},
		{"duplicate a line", func(t *testing.T, ls [][]byte) [][]byte {
			out := append(append([][]byte{}, ls[:6]...), ls[3])
			return append(out, ls[6:]...)
		}, BreakReordered, 7, 4, 6},
		{"truncate mid-line", func(t *testing.T, ls [][]byte) [][]byte {
			ls[9] = ls[9][:len(ls[9])/2]
			return ls
		}, BreakTornTail, 10, 10, 9},
		{"garbage line in the middle", func(t *testing.T, ls [][]byte) [][]byte {
			out := append(append([][]byte{}, ls[:3]...), []byte("not json\n"))
			return append(out, ls[3:]...)
		}, BreakBadJSON, 4, 4, 3},
		{"foreign JSON in the middle", func(t *testing.T, ls [][]byte) [][]byte {
			out := append(append([][]byte{}, ls[:3]...), []byte(`{"hello":"world"}`+"\n"))
			return append(out, ls[3:]...)
		}, BreakBadJSON, 4, 4, 3},
		{"forged log_recovered does not excuse garbage", func(t *testing.T, ls [][]byte) [][]byte {
			// garbage followed by a record that is not the log_recovered naming it
			ls[4] = []byte("torn{\"schema\n")
			return ls
		}, BreakBadJSON, 5, 5, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			l := openLog(t, path, Options{RotateBytes: -1})
			appendN(t, l, 10)
			writeLines(t, path, tc.mutate(t, fileLines(t, path)))

			rep, err := Verify(path)
			require.NoError(t, err)
			assert.Equal(t, tc.records, rep.Records)
			assert.Equal(t, []string{path}, rep.Files)
			if tc.kind == "" {
				require.True(t, rep.OK, "%v", rep.Break)
				assert.Nil(t, rep.Break)
				assert.Equal(t, uint64(10), rep.LastSeq)
				return
			}
			require.False(t, rep.OK)
			require.NotNil(t, rep.Break)
			t.Log(rep.Break)
			assert.Equal(t, tc.kind, rep.Break.Kind)
			assert.Equal(t, tc.line, rep.Break.Line)
			assert.Equal(t, tc.seq, rep.Break.Seq)
			assert.Equal(t, path, rep.Break.File)
			assert.NotEmpty(t, rep.Break.Detail)
		})
	}
}

func TestVerifyReportsAnchor(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	recs := appendN(t, l, 4)
	rep, err := Verify(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), rep.LastSeq)
	assert.Equal(t, recs[3].Hash, rep.LastHash)
}

func TestQueryFilters(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	mk := func(plugin, event, session string, d Decision) {
		r := &Record{Plugin: &PluginRef{Name: plugin}, Event: event, Session: session, Decision: d, Reason: "ok"}
		require.NoError(t, l.Append(r, false))
	}
	mk("a", EventExecDecision, "s1", Allow)
	mk("a", EventExecDecision, "s1", Deny)
	mk("b", EventStore, "s2", Allow)
	require.NoError(t, l.Append(&Record{Event: EventSandboxDegraded, Decision: Error, Reason: "sandbox_unavailable"}, false))
	recs := readAll(t, path)
	require.Len(t, recs, 4)

	tests := []struct {
		name string
		f    Filter
		want []uint64
	}{
		{"all", Filter{}, []uint64{1, 2, 3, 4}},
		{"plugin", Filter{Plugin: "a"}, []uint64{1, 2}},
		{"event", Filter{Event: EventStore}, []uint64{3}},
		{"session", Filter{Session: "s2"}, []uint64{3}},
		{"decision", Filter{Decision: Deny}, []uint64{2}},
		{"combined", Filter{Plugin: "a", Decision: Allow}, []uint64{1}},
		{"since includes equal", Filter{Since: recs[2].Time}, []uint64{3, 4}},
		{"since after all", Filter{Since: recs[3].Time.Add(1)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint64
			require.NoError(t, Query(path, tc.f, func(r *Record) error { got = append(got, r.Seq); return nil }))
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestReadStopsOnCallbackError(t *testing.T) {
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 5)
	stop := os.ErrDeadlineExceeded
	n := 0
	err := Read(path, func(*Record) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop)
	assert.Equal(t, 2, n)
}
