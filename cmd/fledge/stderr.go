package main

import (
	"io"
	"os"

	"github.com/fledgehq/fledge/ui"
	"golang.org/x/term"
)

// pluginStderr is where a plugin's stderr is forwarded. Unchanged when it is a file or a
// pipe (CI logs keep every byte); through the sanitiser when it is a terminal, because
// escape sequences there can retitle the window, write the clipboard (OSC 52) or make the
// terminal answer queries into the user's input — the same injection TIOCSTI gives.
func pluginStderr(w io.Writer) (io.Writer, func()) {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		sw := ui.NewSanitizingWriter(f)
		return sw, func() { _ = sw.Flush() }
	}
	return w, func() {}
}
