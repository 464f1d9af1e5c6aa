// SPDX-License-Identifier: MIT

package platform

import (
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/darwin"
)

// New returns the Seatbelt sandbox.
func New(opts Options) (sandbox.Sandbox, error) {
	return darwin.New(darwin.Options{StubPath: opts.StubPath})
}
