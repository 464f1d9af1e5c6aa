package main

import (
	"fmt"

	"github.com/fledgehq/fledge/sandbox"
)

// pluginExit is how a plugin's own end becomes fledge's: nil for success; otherwise its exit
// status, passed on as fledge's, with one line on stderr naming the plugin and its code or
// signal. The Rust fledge host reports the same ("Plugin 'x' exited with code N"); without it a
// plugin that died of `set -e` on an EACCES looks like a silent success in a terminal.
// res may be nil (the plugin could not be waited for; code then says what fledge reports).
func pluginExit(name string, code int, res *sandbox.Result) error {
	if code == 0 && (res == nil || res.Signal == "") {
		return nil
	}
	if res != nil && res.Signal != "" {
		msg := fmt.Sprintf("plugin %s killed by %s", name, res.Signal)
		if res.OOMKilled {
			msg += " (out of memory: the sandbox's memory limit)"
		}
		if code == 0 {
			code = ExitFailure
		}
		return &ExitError{Code: code, Msg: msg}
	}
	return &ExitError{Code: code, Msg: fmt.Sprintf("plugin %s exited with code %d", name, code)}
}
