// SPDX-License-Identifier: MIT

package invokev1

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/sandbox/stub"
)

func TestMain(m *testing.M) {
	// The sandbox may re-execute this test binary as its stub: that must come first.
	stub.MaybeRun()
	os.Exit(m.Run())
}
