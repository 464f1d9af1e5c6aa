// SPDX-License-Identifier: MIT

package fledgev1

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fledgehq/fledge/audit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every pathguard escape class, sent by a real plugin as an exec request. A refused cwd must
// not run the command (its marker file stays absent), must answer code 126 with reason
// path_escape and a stderr naming the refusal, must be audited as cwd_refused, and the session
// must go on to the next request.
func TestPathguardAttacksThroughPlugin(t *testing.T) {
	f := newFixture(t, "scripted.py", allGrants)
	proj, err := filepath.EvalSymlinks(f.project)
	require.NoError(t, err)
	plugin, err := filepath.EvalSymlinks(f.pluginDir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(proj, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proj, "file.txt"), nil, 0o644))
	for name, target := range map[string]string{
		"link_in":   "a",
		"link_etc":  "/etc",
		"link_up":   "../../../../../../../..",
		"link_home": "../../home",
		"loop1":     "loop2",
		"loop2":     "loop1",
		"link_cwd":  "/proc/self/cwd",
		"link_root": "/proc/self/root",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(proj, name)))
	}

	cases := []struct {
		cwd     string
		refusal string // "" = allowed, then want is the physical cwd the command saw
		want    string
	}{
		{"", "", proj},
		{"a/b", "", proj + "/a/b"},
		{"link_in/b", "", proj + "/a/b"},
		{plugin, "", plugin},
		{"../..", "dotdot_escape", ""},
		{"a/../../x", "dotdot_escape", ""},
		{"/etc", "outside_roots", ""},
		{f.home, "outside_roots", ""},
		{"link_etc", "symlink_escape", ""},
		{"link_up", "symlink_escape", ""},
		{"link_home", "symlink_escape", ""},
		{"loop1", "invalid", ""},
		{"link_cwd", "magic_link", ""},
		{"link_root/etc", "magic_link", ""},
		{"a\x00b", "nul_byte", ""},
		{strings.Repeat("a/", 2500), "too_long", ""},
		{"file.txt", "not_directory", ""},
		{"missing", "not_found", ""},
	}
	var steps []any
	for i, tc := range cases {
		marker := filepath.Join(proj, fmt.Sprintf("ran_%d", i))
		steps = append(steps, msg("type", "exec", "id", fmt.Sprint(i), "cwd", tc.cwd,
			"command", "pwd -P; : > "+marker))
	}
	steps = append(steps, msg("type", "output", "text", "still alive\n"))
	_, rep := f.runScript(steps...)
	assert.Contains(t, f.stdout.String(), "still alive", "the session goes on after refusals")

	refusals := map[string]string{} // cwd -> refusal recorded in the audit log
	for _, r := range f.findRecords(audit.EventCwdRefused) {
		assert.Equal(t, audit.Deny, r.Decision)
		assert.Equal(t, "path_escape", r.Reason)
		refusals[fmt.Sprint(r.Details["cwd_requested"])] = fmt.Sprint(r.Details["refusal"])
	}
	for i, tc := range cases {
		name := tc.cwd
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		t.Run(fmt.Sprintf("%d_%q", i, name), func(t *testing.T) {
			ex := f.reply(rep, fmt.Sprint(i))["value"].(map[string]any)
			marker := filepath.Join(proj, fmt.Sprintf("ran_%d", i))
			if tc.refusal == "" {
				require.EqualValues(t, 0, ex["code"], "stderr: %v", ex["stderr"])
				assert.Equal(t, tc.want, strings.TrimSpace(fmt.Sprint(ex["stdout"])))
				assert.FileExists(t, marker)
				return
			}
			assert.EqualValues(t, 126, ex["code"])
			assert.Equal(t, "path_escape", ex["reason"])
			assert.Contains(t, ex["stderr"], "("+tc.refusal+")")
			assert.Empty(t, ex["stdout"])
			assert.NoFileExists(t, marker, "a refused exec must not run")
			got, ok := refusals[tc.cwd]
			if !ok && len(tc.cwd) > audit.DefaultMaxFieldBytes {
				// The writer cut the plugin's string: its prefix, then the marker.
				for k, v := range refusals {
					if strings.HasPrefix(k, tc.cwd[:audit.DefaultMaxFieldBytes]+audit.TruncatedMarker) {
						got = v
					}
				}
			}
			assert.Equal(t, tc.refusal, got, "audit record for this cwd")
		})
	}
}
