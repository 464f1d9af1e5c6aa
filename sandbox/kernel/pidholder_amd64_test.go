// SPDX-License-Identifier: MIT

//go:build linux && amd64

package kernel

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestHolderSpecLayout: the offsets pidholder_amd64.s reads holderSpec at are its fields'.
func TestHolderSpecLayout(t *testing.T) {
	var s holderSpec
	for _, c := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"args", unsafe.Offsetof(s.args), 0},
		{"sock", unsafe.Offsetof(s.sock), 88},
		{"exe", unsafe.Offsetof(s.exe), 96},
		{"msg", unsafe.Offsetof(s.msg), 104},
		{"msgFD", unsafe.Offsetof(s.msgFD), 112},
		{"argv", unsafe.Offsetof(s.argv), 120},
		{"envv", unsafe.Offsetof(s.envv), 128},
		{"sigIgn", unsafe.Offsetof(s.sigIgn), 136},
		{"failStep", unsafe.Offsetof(s.failStep), 144},
		{"failErrno", unsafe.Offsetof(s.failErrno), 148},
		{"strs", unsafe.Offsetof(s.strs), 152},
	} {
		assert.Equal(t, c.want, c.got, c.name)
	}
	assert.Len(t, holderSteps, 14, "one name per step the child can fail at")
	assert.Len(t, holderELF(), 64+2*56+len(holderCode))
}
