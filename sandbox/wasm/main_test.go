// SPDX-License-Identifier: MIT

package wasm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fledgehq/fledge/sandbox/stub"
	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestMain(m *testing.M) {
	// Execs of a WASM plugin go through the platform sandbox, which re-executes this test
	// binary as its stub: that must come first.
	stub.MaybeRun()
	// The memory-bound test grows a module to its limit inside this process: it runs inside
	// the containment harness's memory-limited cgroup like every other bomb.
	code := testutil.RunContained(m)
	if guestDir != "" {
		os.RemoveAll(guestDir)
	}
	os.Exit(code)
}

var (
	guestOnce sync.Once
	guestDir  string
	guestErr  error
	guestOut  []byte
)

// guest returns the path of a test guest (testdata/guests/<name>) built for wasip1 with the
// Go toolchain running the tests; they are built once per test binary.
func guest(t testing.TB, name string) string {
	t.Helper()
	guestOnce.Do(func() {
		guestDir, guestErr = os.MkdirTemp("", "fledge-wasm-guests-")
		if guestErr != nil {
			return
		}
		for _, g := range []string{"probe", "hostfn", "benchguest"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(guestDir, g+".wasm"), "./testdata/guests/"+g)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
			if guestOut, guestErr = cmd.CombinedOutput(); guestErr != nil {
				return
			}
		}
	})
	if guestErr != nil {
		t.Fatalf("building wasm test guests: %v\n%s", guestErr, guestOut)
	}
	return filepath.Join(guestDir, name+".wasm")
}
