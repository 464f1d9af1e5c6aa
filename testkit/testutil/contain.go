// SPDX-License-Identifier: MIT

package testutil

import (
	"os"
	"testing"
)

// Attack tests (fork bombs, memory bombs, kill -9 -1) must never be able to take the machine
// down if the sandbox regresses. RunContained re-executes the test binary inside a
// throwaway PID and mount namespace, as pid 1 of it, inside a cgroup with pids and memory
// limits of its own; an escaped bomb then fails the test run instead of the machine.

// containStageEnv tells a re-executed test binary which stage it is.
const containStageEnv = "FLEDGE_CONTAIN_STAGE"

// Containment limits, nested under the cgroup the tests were started in.
const (
	ContainPidsMax   = 2048
	ContainMemoryMax = 4 << 30
)

// Contained reports whether this test binary runs inside the containment harness.
func Contained() bool { return os.Getenv(containStageEnv) == "test" }

// RequireContained skips (or, under FLEDGE_REQUIRE_SANDBOX=1, fails) an attack test that
// is not running inside the containment harness.
func RequireContained(t testing.TB) {
	t.Helper()
	SkipUnlessSupported(t, Contained(), "attack test needs the containment harness (root, pid namespace and a pids+memory cgroup)")
}
