// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPluginCwd(t *testing.T) {
	p := Paths{
		ProjectRoot: "/work/proj", PluginDir: "/home/u/.config/fledge/plugins/p",
		PluginDataDir: "/home/u/.config/fledge/plugins/p/data", ConfigDir: "/home/u/.config/fledge",
		StateDir: "/home/u/.local/state/fledge", Home: "/home/u", PluginDirEntries: []string{"bin", "state.json", "data"},
	}
	project := PluginAccess(p, Grants{Filesystem: FilesystemProject}, nil)
	none := PluginAccess(p, Grants{Filesystem: FilesystemNone}, nil)
	cases := []struct {
		name   string
		cwd    string
		access string
		want   string
	}{
		{"user cwd inside the readable project", "/work/proj/sub/dir", "project", "/work/proj/sub/dir"},
		{"user cwd is the project root", "/work/proj", "project", "/work/proj"},
		{"user cwd outside anything readable", "/home/u/elsewhere", "project", "/work/proj"},
		{"project not readable: data dir", "/work/proj/sub", "none", p.PluginDataDir},
		{"user cwd in the config dir is never chosen", "/home/u/.config/fledge", "project", "/work/proj"},
		{"the plugin's own bin dir is readable", "/home/u/.config/fledge/plugins/p/bin", "none", "/home/u/.config/fledge/plugins/p/bin"},
		{"another plugin's dir is not", "/home/u/.config/fledge/plugins/q", "project", "/work/proj"},
		{"relative cwd ignored", "proj", "project", "/work/proj"},
		{"prefix is not containment", "/work/projector", "project", "/work/proj"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := project
			if tc.access == "none" {
				a = none
			}
			assert.Equal(t, tc.want, PluginCwd(tc.cwd, p.ProjectRoot, p.PluginDataDir, a))
		})
	}
}
