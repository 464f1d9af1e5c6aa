// SPDX-License-Identifier: MIT

package plugin

import (
	"errors"
	"io/fs"
)

// knownDefaults stand in for the server.json of popular npm MCP servers that ship none and
// need a setting to work confined: what a server.json of theirs would declare, with the
// place being the plugin's data dir. They apply exactly as a shipped server.json does (the
// user's --env and --secret win), are written into bin/server where the user sees them, and
// are reviewed as part of the install like any other environment.
//
// @modelcontextprotocol/server-memory keeps its graph in memory.jsonl next to its own
// dist/index.js (a relative MEMORY_FILE_PATH is taken from there too): inside the plugin's
// read-only code, so its first write fails. Its own variable, pointed into the data dir,
// keeps the graph across runs and updates (update keeps the data dir).
//
// @modelcontextprotocol/server-filesystem allows the directories named as its arguments,
// else the client's roots, which it asks for once initialized and applies on its own time
// (a realpath and a stat each): nothing tells the client when, and under load a first tool
// call overtook them and was refused ("not in " an empty list). The project root as its
// argument, as the server's README runs it, is allowed from its first instruction; the one
// root fledge offers names the same directory. Without a project it gets no argument.
var knownDefaults = map[string]serverJSON{
	"@modelcontextprotocol/server-memory":     {env: []string{"MEMORY_FILE_PATH=${FLEDGE_DATA_DIR}/memory.jsonl"}},
	"@modelcontextprotocol/server-filesystem": {args: []string{"${FLEDGE_PROJECT_ROOT}"}},
}

// defaultsFor is the server.json the package ships, else fledge's known defaults for it
// (nil: neither).
func defaultsFor(pkgDir, pkg string) (*serverJSON, error) {
	sj, err := readServerJSON(pkgDir, pkg)
	if err != nil && !errors.Is(err, fs.ErrNotExist) || sj != nil {
		return sj, err // a server.json that is there but unreadable applies nothing, as before
	}
	if d, ok := knownDefaults[pkg]; ok {
		return &serverJSON{args: append([]string{}, d.args...), env: append([]string{}, d.env...)}, nil
	}
	return nil, nil
}
