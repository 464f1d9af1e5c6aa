package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/fledgehq/fledge/internal/testutil"
)

// scriptCondition adds conditions to the scripts. [jq]: jq is installed (the seed's shell
// example needs it); when it is not, under FLEDGE_REQUIRE_SANDBOX=1 the script fails
// instead of skipping, so CI cannot pass without running the seed's tool plugin.
func scriptCondition(cond string) (bool, error) {
	switch cond {
	case "jq":
		if _, err := exec.LookPath("jq"); err != nil {
			if os.Getenv(testutil.RequireSandboxEnv) == "1" {
				return false, fmt.Errorf("%s=1 but jq is not installed (the seed's system-info plugin needs it; .ci/run installs it)", testutil.RequireSandboxEnv)
			}
			return false, nil
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}
