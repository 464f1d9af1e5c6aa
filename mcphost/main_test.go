package mcphost

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/internal/testutil"
	"github.com/fledgehq/fledge/sandbox/stub"
)

func TestMain(m *testing.M) {
	// The sandbox re-executes this test binary as its stub: that must come first.
	stub.MaybeRun()
	// The npm cache and the servers installed for the tests live under the real home,
	// found before any test swaps HOME for a fake one.
	initNPMCache()
	// The hostile servers run inside the containment harness (throwaway pid namespace,
	// limited cgroup), so a bound that fails cannot take the machine with it.
	os.Exit(testutil.RunContained(m))
}
