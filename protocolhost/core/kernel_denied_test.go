// SPDX-License-Identifier: MIT

package core

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fledgehq/fledge/sandbox"
)

// A loop of refusals is two records, and the session's deny count is the true total.
func TestKernelDeniedCountsEveryRefusal(t *testing.T) {
	r := NewRecorder(nil, "s", nil, sandbox.Report{}, nil)
	r.KernelDenied(sandbox.KernelDenial{Kind: "syscall", Syscall: "io_uring_setup", Count: 1}, "loop")
	r.KernelDenied(sandbox.KernelDenial{Kind: "syscall", Syscall: "io_uring_setup", Count: 100000, Final: true}, "loop")
	denied, _ := r.Counts()
	assert.EqualValues(t, 100000, denied)
	r.KernelDenied(sandbox.KernelDenial{Kind: "syscall", Syscall: "unshare", Count: 1}, "once")
	denied, _ = r.Counts()
	assert.EqualValues(t, 100001, denied)
}
