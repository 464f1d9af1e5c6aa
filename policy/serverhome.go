// SPDX-License-Identifier: MIT

package policy

import "path/filepath"

// ServerHome is the home of a long-lived server process (an MCP server): HOME and the XDG
// base directories inside its private data dir, the one place it may always write. A
// server that keeps its state, cache or config under ~ (node's os.homedir(), Python's
// platformdirs, an SDK's token cache) then works without flags of its own, and keeps it
// across runs; the user's real home is out of the sandbox's view anyway. Nothing is made:
// programs that use these make the directories they need.
func ServerHome(dataDir string) map[string]string {
	if dataDir == "" {
		return nil
	}
	return map[string]string{
		"HOME":            dataDir,
		"XDG_CONFIG_HOME": filepath.Join(dataDir, ".config"),
		"XDG_DATA_HOME":   filepath.Join(dataDir, ".local", "share"),
		"XDG_STATE_HOME":  filepath.Join(dataDir, ".local", "state"),
		"XDG_CACHE_HOME":  filepath.Join(dataDir, ".cache"),
	}
}
