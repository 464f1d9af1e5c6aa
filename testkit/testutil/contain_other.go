// SPDX-License-Identifier: MIT

//go:build !linux

package testutil

import (
	"fmt"
	"os"
	"testing"
)

// RunContained runs m uncontained: PID namespaces and cgroups exist only on Linux, so
// attack tests skip (RequireContained), or the run fails under FLEDGE_REQUIRE_SANDBOX=1.
func RunContained(m *testing.M) int {
	if os.Getenv(RequireSandboxEnv) == "1" {
		fmt.Fprintln(os.Stderr, "containment harness unavailable on this OS")
		return 1
	}
	return m.Run()
}
