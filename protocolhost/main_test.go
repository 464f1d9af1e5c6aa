package protocolhost

import (
	"os"
	"testing"

	"github.com/fledgehq/fledge/sandbox/stub"
)

func TestMain(m *testing.M) {
	// The sandbox re-executes this test binary as its stub.
	stub.MaybeRun()
	os.Exit(m.Run())
}
