// SPDX-License-Identifier: MIT

package mcp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
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

var (
	npmRoot string // where the official MCP packages are installed for the tests
	npmHome string // the real HOME (npm's cache for offline installs)
)

func initNPMCache() {
	npmHome, _ = os.UserHomeDir()
	npmRoot = os.Getenv("FLEDGE_TEST_NPM_DIR")
	if npmRoot == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		npmRoot = filepath.Join(cache, "fledge-test-npm")
	}
}
