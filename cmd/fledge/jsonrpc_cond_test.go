// SPDX-License-Identifier: MIT

package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// scriptCondition adds conditions to the scripts. Under FLEDGE_REQUIRE_SANDBOX=1 a condition
// that would skip fails instead, so CI cannot pass without running what it guards.
//   - [jq]: jq is installed (the JSON-RPC 2.0 spec's shell example needs it).
//   - [root]: the process may mount (tmpfs). CI runs as root.
func scriptCondition(cond string) (bool, error) {
	switch cond {
	case "root":
		if os.Geteuid() != 0 && os.Getenv(testutil.RequireSandboxEnv) == "1" {
			return false, fmt.Errorf("%s=1 but not root: cannot mount a tmpfs", testutil.RequireSandboxEnv)
		}
		return os.Geteuid() == 0, nil
	case "jq":
		if _, err := exec.LookPath("jq"); err != nil {
			if os.Getenv(testutil.RequireSandboxEnv) == "1" {
				return false, fmt.Errorf("%s=1 but jq is not installed (the JSON-RPC 2.0 spec's system-info plugin needs it; .ci/run installs it)", testutil.RequireSandboxEnv)
			}
			return false, nil
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}
