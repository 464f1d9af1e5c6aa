// SPDX-License-Identifier: MIT

package core

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestMain(m *testing.M) {
	// The sandbox re-executes this test binary as its stub: that must come first.
	stub.MaybeRun()
	// Attack tests (fork bomb, memory bomb, kill -9 -1) run inside a throwaway pid namespace
	// and a pids+memory-limited cgroup, so a sandbox regression fails the run, not the machine.
	os.Exit(testutil.RunContained(m))
}
