// SPDX-License-Identifier: MIT

package sandbox

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDenialLogCountsRepeats(t *testing.T) {
	var got []KernelDenial
	l := NewDenialLog(func(d KernelDenial) { got = append(got, d) })
	for i := 0; i < 100000; i++ {
		l.Add(KernelDenial{Kind: "syscall", Syscall: "io_uring_setup", Errno: "EPERM", Pid: 1000 + i%7})
	}
	l.Add(KernelDenial{Kind: "syscall", Syscall: "unshare", Errno: "EPERM"})
	assert.Len(t, got, 2, "one report per kind while it runs")
	l.Flush()
	l.Add(KernelDenial{Kind: "syscall", Syscall: "bpf"}) // after the end: dropped
	assert.Len(t, got, 3)
	assert.Equal(t, int64(1), got[0].Count)
	assert.False(t, got[0].Final)
	assert.Equal(t, "io_uring_setup", got[2].Syscall)
	assert.Equal(t, int64(100000), got[2].Count)
	assert.True(t, got[2].Final)
	l.Flush()
	assert.Len(t, got, 3, "one flush")
}

func TestDenialLogBoundsKinds(t *testing.T) {
	var got []KernelDenial
	l := NewDenialLog(func(d KernelDenial) { got = append(got, d) })
	for i := 0; i < 10*MaxDenialKinds; i++ {
		for j := 0; j < 3; j++ {
			l.Add(KernelDenial{Kind: "path", Path: fmt.Sprint("/p/", i), Traced: true})
		}
	}
	l.Flush()
	assert.LessOrEqual(t, len(got), 2*MaxDenialKinds+2)
	var overflow int64
	for _, d := range got {
		if d.Kind == "overflow" && d.Final {
			overflow = d.Count
		}
	}
	assert.EqualValues(t, 3*9*MaxDenialKinds, overflow, "every call past the bound is still counted")
}

func TestDenialLogNil(t *testing.T) {
	var l *DenialLog
	l.Add(KernelDenial{})
	l.Flush()
	NewDenialLog(nil).Add(KernelDenial{})
}
