// SPDX-License-Identifier: MIT

package main

import "fmt"

// traceHint tells the user, after a traced run, how many refusals it left and how to see
// them.
func traceHint(g *Globals, n int, session string) {
	if session == "" {
		return
	}
	fmt.Fprintf(g.Streams.Err, "fledge: trace: %d refused access(es) on record in session %s (fledge audit show --session %s --event kernel_denied)\n", n, session, session)
}
