// SPDX-License-Identifier: MIT

package protocolhost

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/ui"
)

// ShowPluginLog is `fledge plugins logs NAME`: what the plugin's servers wrote on stderr
// (MCP servers, JSON-RPC 2.0 plugins; the previous file first), each line sanitised. A
// plugin removed since keeps no log; one never run as a server has none yet.
func (h *Host) ShowPluginLog(name string, w io.Writer) error {
	if _, err := h.installed(name); err != nil {
		return err
	}
	cur, prev, err := h.Env.PluginLogPaths(name)
	if err != nil {
		return exitErr(ExitCannotRun, "plugin logs: %v", err)
	}
	shown := false
	for _, p := range []string{prev, cur} {
		f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return exitErr(ExitCannotRun, "plugin logs: %v", err)
		}
		// fledge writes the log and caps it; a file grown past that anyway is read no
		// further than twice the cap.
		data, err := io.ReadAll(io.LimitReader(f, 2*core.PluginLogCap))
		f.Close()
		if err != nil {
			return exitErr(ExitCannotRun, "plugin logs: %s: %v", p, err)
		}
		for _, line := range strings.SplitAfter(string(data), "\n") {
			if line = strings.TrimRight(line, "\r\n"); line != "" {
				fmt.Fprintln(w, ui.PlainText(line))
				shown = true
			}
		}
	}
	if !shown {
		fmt.Fprintf(w, "%s has written nothing on stderr as a server (its log: %s)\n", name, cur)
	}
	return nil
}
