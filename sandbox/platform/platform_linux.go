// SPDX-License-Identifier: MIT

package platform

import (
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/linux"
)

// New returns the Linux sandbox.
func New(opts Options) (sandbox.Sandbox, error) {
	return linux.New(linux.Options{StubPath: opts.StubPath, CgroupParent: opts.CgroupParent, Prestart: opts.Launch})
}
