// Command fledge is a security-hardened host for untrusted fledge-v1 plugins.
package main

import (
	"os"

	"github.com/fledgehq/fledge/sandbox/stub"
)

func main() {
	// The sandbox re-executes this binary as the confined child's first program; that path
	// must not pay for any of the CLI's initialisation.
	stub.MaybeRun()
	stop := startProfiles()
	code := Main(os.Args[1:], defaultStreams())
	stop()
	os.Exit(code)
}
