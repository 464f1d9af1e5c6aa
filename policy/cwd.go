// SPDX-License-Identifier: MIT

package policy

import (
	"path/filepath"

	"github.com/fledgehq/fledge/sandbox"
)

// PluginCwd is the directory a plugin process starts in. Like the Rust fledge host, the user's
// working directory when the plugin may read it (so relative paths on the command line mean
// what the user typed); else the project root when the plugin may read the project; else its
// data dir, which it always may. userCwd must have symlinks resolved (the profile's paths are).
// A directory under a Deny path is never chosen, even inside an allowed carve-out's parent.
func PluginCwd(userCwd, projectRoot, dataDir string, a sandbox.Access) string {
	if userCwd != "" && filepath.IsAbs(userCwd) && readable(userCwd, a) {
		return filepath.Clean(userCwd)
	}
	if projectRoot != "" && readable(projectRoot, a) {
		return projectRoot
	}
	return dataDir
}

// readable reports whether a profile lets its process read path: inside an allowed entry
// and not inside a denied one, unless an allowed entry is itself inside that denied path (a
// carve-out such as the plugin's own dir under the config dir).
func readable(path string, a sandbox.Access) bool {
	var in string // the deepest allowed entry holding path
	for _, group := range [][]string{a.ReadOnly, a.ReadWrite, a.ReadExec} {
		for _, allow := range group {
			if Within(path, allow) && len(allow) > len(in) {
				in = allow
			}
		}
	}
	if in == "" {
		return false
	}
	for _, deny := range a.Deny {
		if Within(path, deny) && !Within(in, deny) {
			return false
		}
	}
	return true
}
