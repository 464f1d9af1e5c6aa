// SPDX-License-Identifier: MIT

//go:build !linux && !darwin

package platform

import (
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/fallback"
)

// New returns the portable restricted fallback (no filesystem confinement; Strict specs
// are refused).
func New(opts Options) (sandbox.Sandbox, error) {
	return fallback.New(fallback.Options{StubPath: opts.StubPath})
}
