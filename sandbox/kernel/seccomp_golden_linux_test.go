// SPDX-License-Identifier: MIT

package kernel

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestSeccompProgramGolden pins the BPF program buildFilter emits, instruction for
// instruction, for every combination of Filter's fields and both dispatch forms (the binary
// search and the linear chain): a change to how the program is built that should change
// nothing (a refactor) must leave every program byte-identical. A deliberate change to the
// filter rewrites the golden with -update, and its diff shows which policies it touched.
func TestSeccompProgramGolden(t *testing.T) {
	if !SeccompSupported() {
		t.Skip("no seccomp filter on this architecture")
	}
	golden := filepath.Join("testdata", "seccomp_program_"+runtime.GOARCH+".golden")
	var b strings.Builder
	for _, linear := range []bool{false, true} {
		for bits := 0; bits < 1<<5; bits++ {
			f := Filter{
				DenyUnix: bits&1 != 0, TCPOnly: bits&2 != 0, ConnectCheck: bits&4 != 0,
				Notify: bits&8 != 0, Trace: bits&16 != 0,
			}
			linearDispatchForTest = linear
			prog, err := buildFilter(f)
			linearDispatchForTest = false
			require.NoError(t, err, "%+v", f)
			fmt.Fprintf(&b, "linear=%t %+v len=%d sha256=%x\n", linear, f, len(prog), programDigest(prog))
		}
	}
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	if os.IsNotExist(err) {
		t.Skipf("no golden for %s (run with -update on this architecture to take one)", runtime.GOARCH)
	}
	require.NoError(t, err)
	require.Equal(t, string(want), b.String(), "the seccomp program changed (-update rewrites the golden when that is meant)")
}

// programDigest is the sha256 of the program's instructions, each written out field by
// field so the digest depends on nothing but their values.
func programDigest(prog []unix.SockFilter) []byte {
	h := sha256.New()
	for _, ins := range prog {
		fmt.Fprintf(h, "%04x %02x %02x %08x\n", ins.Code, ins.Jt, ins.Jf, ins.K)
	}
	return h.Sum(nil)
}
