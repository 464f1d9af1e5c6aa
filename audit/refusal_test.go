// SPDX-License-Identifier: MIT

package audit

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/reason"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestRecordRefusal(t *testing.T) {
	plugin := &PluginRef{Name: "hello", Version: "1.0.0", Source: "/src/hello", ManifestDigest: "sha256:approved"}
	tests := []struct {
		name       string
		ref        Refusal
		wantReason reason.Code
		wantErr    error
	}{
		{"manifest changed", Refusal{Session: "s1", Plugin: plugin, Command: "hello", Kind: RefusalManifestChanged,
			Message: "plugin.toml changed since it was approved", Details: map[string]any{"manifest_sha256": "sha256:new"}},
			reason.LaunchFailed, nil},
		{"binary missing", Refusal{Plugin: plugin, Command: "hello", Kind: RefusalBinaryUnusable, Message: `command binary "hello.sh": no such file`},
			reason.LaunchFailed, nil},
		{"strict sandbox unavailable", Refusal{Plugin: plugin, Command: "hello", Kind: RefusalSandboxUnavailable,
			Sandbox: &SandboxInfo{Mode: "none"}, Message: "landlock unavailable"}, reason.SandboxUnavailable, nil},
		{"reason override", Refusal{Plugin: plugin, Kind: RefusalOther, Reason: reason.Cancelled}, reason.Cancelled, nil},
		{"details cannot hide the kind", Refusal{Plugin: plugin, Kind: RefusalManifestChanged,
			Details: map[string]any{DetailRefusal: "nothing to see"}}, reason.LaunchFailed, nil},
		{"no plugin", Refusal{Kind: RefusalOther}, "", ErrInvalidRefusal},
		{"unknown kind", Refusal{Plugin: plugin, Kind: "because"}, "", ErrInvalidRefusal},
		{"ok is not a refusal reason", Refusal{Plugin: plugin, Kind: RefusalOther, Reason: reason.OK}, "", ErrInvalidRefusal},
		{"unknown reason", Refusal{Plugin: plugin, Kind: RefusalOther, Reason: "nope"}, "", ErrInvalidRefusal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := testPath(t)
			l := openLog(t, path, Options{})
			err := RecordRefusal(l, tc.ref)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				fi, err := os.Stat(path)
				require.NoError(t, err)
				assert.Zero(t, fi.Size(), "nothing recorded")
				return
			}
			require.NoError(t, err)
			recs := readAll(t, path)
			require.Len(t, recs, 1)
			r := recs[0]
			assert.Equal(t, EventPluginStart, r.Event)
			assert.Equal(t, Deny, r.Decision)
			assert.Equal(t, string(tc.wantReason), r.Reason)
			assert.Equal(t, tc.ref.Session, r.Session)
			assert.Equal(t, tc.ref.Plugin, r.Plugin)
			assert.Equal(t, tc.ref.Sandbox, r.Sandbox)
			assert.Equal(t, tc.ref.Kind, r.Details[DetailRefusal])
			if tc.ref.Message != "" {
				assert.Equal(t, tc.ref.Message, r.Details[DetailMessage])
			}
			if tc.ref.Command != "" {
				assert.Equal(t, tc.ref.Command, r.Details[DetailCommand])
			}
			for k, v := range tc.ref.Details {
				if k != DetailRefusal {
					assert.Equal(t, v, r.Details[k])
				}
			}
			rep, err := Verify(path)
			require.NoError(t, err)
			assert.True(t, rep.OK)
		})
	}
}

func TestRecordRefusalUnwritableLog(t *testing.T) {
	ref := Refusal{Plugin: &PluginRef{Name: "hello"}, Kind: RefusalManifestChanged}
	require.ErrorIs(t, RecordRefusal(nil, ref), ErrNoLog)

	// The write fails: the error comes back and the log is left as it was, verifiable.
	path := testPath(t)
	l := openLog(t, path, Options{})
	appendN(t, l, 2)
	before := mustRead(t, path)
	fail := failingIO{partialWrite: true}
	fail.install(l)
	require.ErrorIs(t, RecordRefusal(l, ref), unix.EIO)
	requireWholeLog(t, path, before, 2)
}
