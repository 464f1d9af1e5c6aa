// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPluginDirRulesLeaveOutHostFiles(t *testing.T) {
	base := Paths{PluginDir: "/c/plugins/p", PluginDataDir: "/c/plugins/p/data", ConfigDir: "/c", StateDir: "/s"}
	tests := []struct {
		name    string
		entries []string
		want    []string
	}{
		{"unknown entries: whole dir", nil, []string{"/c/plugins/p"}},
		{"state and data left out", []string{"plugin.toml", "bin", "state.json", "state.json.corrupt-1", "data"},
			[]string{"/c/plugins/p/plugin.toml", "/c/plugins/p/bin"}},
		{"hostile names ignored", []string{"..", ".", "", "a/b", "ok"}, []string{"/c/plugins/p/ok"}},
		{"empty dir", []string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base
			p.PluginDirEntries = tt.entries
			assert.Equal(t, tt.want, pluginDirRules(p))
			for _, a := range []struct{ rx, rw []string }{
				{ExecAccess(p, Default()).ReadExec, ExecAccess(p, Default()).ReadWrite},
				{PluginAccess(p, Grants{}, Default()).ReadExec, PluginAccess(p, Grants{}, Default()).ReadWrite},
			} {
				for _, w := range tt.want {
					assert.Contains(t, a.rx, w)
				}
				for _, x := range append(a.rx, a.rw...) {
					assert.NotEqual(t, "/c/plugins/p/state.json", x)
				}
				assert.Contains(t, a.rw, "/c/plugins/p/data")
			}
		})
	}
}

func TestGitAccessIsReadOnly(t *testing.T) {
	p := Paths{ProjectRoot: "/work/proj", PluginDir: "/c/plugins/p", PluginDataDir: "/c/plugins/p/data", ConfigDir: "/c", StateDir: "/s"}
	a := GitAccess(p)
	assert.Contains(t, a.ReadOnly, "/work/proj")
	assert.Equal(t, DeviceReadWrite, a.ReadWrite, "nothing writable but the harmless devices")
	for _, x := range append(append(a.ReadExec, a.ReadOnly...), a.ReadWrite...) {
		assert.NotContains(t, x, "/c/plugins", "no plugin dir")
	}
	assert.Contains(t, a.Deny, "/c")
}
