// SPDX-License-Identifier: MIT

// Command fledge is a security-hardened host for untrusted plugins.
package main

import (
	"os"

	"github.com/fledgehq/fledge/protocolhost"
)

func main() {
	// The sandbox re-executes this binary as the confined child's first program; that path
	// must not pay for any of the CLI's initialisation.
	protocolhost.MaybeRunChild()
	stop := startProfiles()
	code := Main(os.Args[1:], defaultStreams())
	stop()
	os.Exit(code)
}
