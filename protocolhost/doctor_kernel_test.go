// SPDX-License-Identifier: MIT

package protocolhost

import (
	"strings"
	"testing"
)

// TestKernelRefusalsTextNamesWhatIsNotRecorded: doctor's line on kernel refusals claims no
// more than the listener records: refused AF_UNIX sockets are answered in the filter
// (recorded in trace mode only) and the ENOSYS rows not at all (docs/audit.md).
func TestKernelRefusalsTextNamesWhatIsNotRecorded(t *testing.T) {
	s := kernelRefusalsText("seccomp-notify")
	for _, want := range []string{"AF_UNIX", "ENOSYS", "--trace"} {
		if !strings.Contains(s, want) {
			t.Errorf("doctor's kernel refusals line does not say %q: %s", want, s)
		}
	}
	if strings.Contains(s, "every seccomp deny-list refusal") {
		t.Errorf("doctor claims every refusal is recorded: %s", s)
	}
}
