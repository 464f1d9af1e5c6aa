// SPDX-License-Identifier: MIT

// Package testutil holds helpers shared by fledge's tests.
package testutil

import (
	"os"
	"testing"
)

// RequireSandboxEnv is set by CI: a sandbox feature that is missing fails the test instead of
// skipping it, because a skipped security test proves nothing.
const RequireSandboxEnv = "FLEDGE_REQUIRE_SANDBOX"

// SkipUnlessSupported skips t when supported is false, or fails it when
// FLEDGE_REQUIRE_SANDBOX=1.
func SkipUnlessSupported(t testing.TB, supported bool, why string) {
	t.Helper()
	if supported {
		return
	}
	if os.Getenv(RequireSandboxEnv) == "1" {
		t.Fatalf("%s=1 but this sandbox feature is unavailable: %s", RequireSandboxEnv, why)
	}
	t.Skipf("not supported, skipping: %s", why)
}
