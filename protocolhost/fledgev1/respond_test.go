// SPDX-License-Identifier: MIT

package fledgev1

import (
	"bytes"
	"context"
	"testing"

	"github.com/fledgehq/fledge/protocol"
	"github.com/stretchr/testify/require"
)

// respondExecLine is what respondExec streams for these values.
func respondExecLine(t testing.TB, id protocol.ID, out protocol.ExecResult, stdout, stderr []byte) []byte {
	var buf bytes.Buffer
	s := &session{writer: protocol.NewWriter(&buf), ctx: context.Background()}
	s.pending.Add(1)
	s.respondExec(id, out, stdout, stderr)
	require.EqualValues(t, 0, s.pending.Load(), "the reply is counted")
	return buf.Bytes()
}

// The streamed exec reply is byte for byte what encoding the ExecResult would give.
func TestRespondExecMatchesEncoder(t *testing.T) {
	for _, tc := range []struct {
		name           string
		out            protocol.ExecResult
		stdout, stderr string
	}{
		{"plain", protocol.ExecResult{Code: 0}, "hi\n", ""},
		{"binary and escapes", protocol.ExecResult{Code: 3, StdoutTruncated: true}, "a\x00\xff\u2028\"\\<&>", "\x1b[2J"},
		{"timeout note", protocol.ExecResult{Code: 124, TimedOut: true, Reason: "timeout", Stderr: "\nfledge: timed out\n"}, "", "partial"},
		{"all flags", protocol.ExecResult{Code: 137, StdoutTruncated: true, StderrTruncated: true, Reason: "oom_killed"}, "x", "y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, id := range []protocol.ID{protocol.ID(`"7"`), protocol.ID(`42`)} {
				got := respondExecLine(t, id, tc.out, []byte(tc.stdout), []byte(tc.stderr))
				want := tc.out
				want.Stdout = tc.stdout
				want.Stderr = tc.stderr + tc.out.Stderr
				exp, err := protocol.Encode(protocol.NewResponse(id, want))
				require.NoError(t, err)
				require.Equal(t, string(exp), string(got))
			}
		})
	}
}

func FuzzRespondExec(f *testing.F) {
	f.Add([]byte("out\x00\xff"), []byte("err\n"), 1, true)
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, code int, flag bool) {
		out := protocol.ExecResult{Code: code, StdoutTruncated: flag, TimedOut: !flag}
		got := respondExecLine(t, protocol.ID(`"1"`), out, stdout, stderr)
		want := out
		want.Stdout, want.Stderr = string(stdout), string(stderr)
		exp, err := protocol.Encode(protocol.NewResponse(protocol.ID(`"1"`), want))
		require.NoError(t, err)
		require.Equal(t, string(exp), string(got))
	})
}
