// SPDX-License-Identifier: MIT

package audit

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomValue builds a details value of the kinds callers put in records, plus the ones the
// direct walk must hand to normalize (floats, invalid UTF-8, structs, typed maps).
func randomValue(r *rand.Rand, depth int) any {
	k := r.IntN(16)
	if depth > 3 && k >= 10 {
		k = r.IntN(10)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 1
	case 2:
		return r.Int64() - math.MaxInt64/2
	case 3:
		return r.IntN(1000)
	case 4:
		return uint64(r.Uint64())
	case 5:
		return randomString(r)
	case 6:
		return r.Float64() * 1e6 // normalize's
	case 7:
		return "bad \xff utf-8" // normalize's
	case 8:
		return json.Number(strconv.Itoa(r.IntN(99)))
	case 9:
		return []string{randomString(r), "<html> & \u2028"}
	case 10:
		n := r.IntN(4)
		out := make([]any, n)
		for i := range out {
			out[i] = randomValue(r, depth+1)
		}
		return out
	case 11:
		return struct{ A int }{3} // normalize's
	case 12:
		return map[string]string{"x": "y"} // normalize's
	case 13:
		return []any{}
	default:
		n := r.IntN(4)
		out := make(map[string]any, n)
		for range n {
			out[randomString(r)] = randomValue(r, depth+1)
		}
		return out
	}
}

func randomString(r *rand.Rand) string {
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "\n", "\t", "<", ">", "&", "é", "💡", "\u2028", "\x00", "\x1f", "/"}
	n := r.IntN(8)
	s := ""
	for range n {
		s += alphabet[r.IntN(len(alphabet))]
	}
	return s
}

// TestNormalizeFastMatchesNormalize: whatever the direct walk accepts encodes to exactly the
// bytes the encode-and-decode round trip gives, so the stored line and its hash do not
// depend on which path sealed the record; and the walk refuses what it cannot vouch for.
func TestNormalizeFastMatchesNormalize(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 7))
	fast := 0
	for i := range 20000 {
		d := map[string]any{}
		for range r.IntN(6) {
			d[randomString(r)] = randomValue(r, 0)
		}
		if i%50 == 0 {
			d = map[string]any{} // empty: omitted
		}
		rec := &Record{
			Schema: SchemaVersion, Seq: uint64(i + 1), Time: time.Now().UTC(), Session: randomString(r),
			Host: "h", UID: 1, PID: 2, Plugin: &PluginRef{Name: randomString(r), Version: "1"},
			Event: EventToolCall, Decision: Allow, Reason: "ok", Details: d,
			Sandbox: &SandboxInfo{Mode: "landlock", LandlockABI: 7}, PrevHash: ZeroHash,
		}
		if i%7 == 0 {
			rec.Plugin, rec.Sandbox = nil, nil
		}
		if i%11 == 0 {
			rec.Session = "torn \xc3"
		}
		slow, serr := normalize(rec)
		n, ok := plainRecord(rec)
		if !ok {
			continue
		}
		fast++
		require.NoError(t, serr, "the walk accepted what normalize refuses: %#v", rec.Details)
		want, err := body(slow)
		require.NoError(t, err)
		got, err := body(n)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "details %#v", rec.Details)
		// And the line is a fixed point: it reads back to itself.
		back, err := decodeRecord(got)
		require.NoError(t, err)
		again, err := body(back)
		require.NoError(t, err)
		require.Equal(t, string(got), string(again))
	}
	require.Greater(t, fast, 2000, "the direct walk should take the ordinary records")

	// What it must refuse.
	for _, v := range []any{1.5, "a\xffb", struct{}{}, map[string]string{}, json.Number("1")} {
		_, ok := plainRecord(&Record{Details: map[string]any{"v": v}})
		require.False(t, ok, "%#v", v)
	}
	_, ok := plainRecord(&Record{Details: map[string]any{"k\xff": 1}})
	require.False(t, ok)
	cyc := map[string]any{}
	cyc["self"] = cyc
	_, ok = plainRecord(&Record{Details: cyc})
	require.False(t, ok, "a cycle goes to normalize, which reports it")
}
