package main

import (
	"io"

	"github.com/fledgehq/fledge/ui"
)

// pluginStderr is where a plugin's stderr (or other bytes of a plugin shown to the user) is
// forwarded: unchanged when it is a file or a pipe (CI logs keep every byte); through the
// sanitiser when it is a terminal, because escape sequences there can retitle the window,
// write the clipboard (OSC 52) or make the terminal answer queries into the user's input —
// the same injection TIOCSTI gives. See ui.PluginStream.
func pluginStderr(w io.Writer) (io.Writer, func()) { return ui.PluginStream(w) }
