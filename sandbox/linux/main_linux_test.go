// SPDX-License-Identifier: MIT

package linux

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// helperEnv makes the test binary a small attack program (it is on the sandbox's
// read+exec list in tests that use it).
const helperEnv = "FLEDGE_LINUX_TEST_HELPER"

func TestMain(m *testing.M) {
	stub.MaybeRun()
	// FLEDGE_TEST_LAUNCHER=1: every run that can goes through its session's launcher, the
	// first one included (launcher_linux.go).
	launcherFirstForTest = os.Getenv("FLEDGE_TEST_LAUNCHER") == "1"
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h))
	}
	os.Exit(testutil.RunContained(m))
}

func runHelper(h string) int {
	switch h {
	case "connect":
		c, err := net.DialTimeout("tcp", os.Args[1], 2*time.Second)
		if err != nil {
			fmt.Println("connect failed:", err)
			return 3
		}
		c.Close()
		fmt.Println("connected")
		return 0
	case "host":
		return runHostHelper(os.Args[1], os.Args[2], os.Args[3])
	case "ipc":
		return runIPCHelper(os.Args[1], os.Args[2], os.Args[3])
	case "userns":
		return runUserNSHelper(os.Args[1], os.Args[2])
	case "egress-userns":
		return runEgressUserNSHelper(os.Args[1], os.Args[2], os.Args[3])
	case "alloc":
		// Touch memory page by page until the cgroup stops us.
		var keep [][]byte
		for i := 0; i < 4096; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				if j%4096 == 0 {
					b[j] = 1
				}
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep), "MiB")
		return 0
	}
	return 2
}
