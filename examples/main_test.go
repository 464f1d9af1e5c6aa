// SPDX-License-Identifier: MIT

package examples_test

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// The demo runs the escape artist (a bounded fork flood, kill -9 -1 when signals are
// scoped): inside the containment harness, a sandbox regression fails the test instead of
// hurting the machine.
func TestMain(m *testing.M) {
	os.Exit(testutil.RunContained(m))
}
