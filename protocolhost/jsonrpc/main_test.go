// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestMain(m *testing.M) {
	// The sandbox re-executes this test binary as its stub: that must come first.
	stub.MaybeRun()
	// The attack tests start real plugins: inside the containment harness.
	os.Exit(testutil.RunContained(m))
}
