// SPDX-License-Identifier: MIT

//go:build linux && amd64

package kernel

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// TestVForkSpecLayout: the offsets fork_amd64.s reads vforkSpec at are its fields'.
func TestVForkSpecLayout(t *testing.T) {
	var s vforkSpec
	for _, c := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"args", unsafe.Offsetof(s.args), 0},
		{"procs", unsafe.Offsetof(s.procs), 88},
		{"nprocs", unsafe.Offsetof(s.nprocs), 96},
		{"stdio", unsafe.Offsetof(s.stdio), 104},
		{"core", unsafe.Offsetof(s.core), 128},
		{"nofile", unsafe.Offsetof(s.nofile), 144},
		{"mask", unsafe.Offsetof(s.mask), 160},
		{"path", unsafe.Offsetof(s.path), 168},
		{"argv", unsafe.Offsetof(s.argv), 176},
		{"envv", unsafe.Offsetof(s.envv), 184},
		{"fail", unsafe.Offsetof(s.fail), 192},
		{"zero", unsafe.Offsetof(s.zero), 200},
		{"scFlag", unsafe.Offsetof(s.scFlag), 208},
		{"scProg", unsafe.Offsetof(s.scProg), 216},
		{"scPl", unsafe.Offsetof(s.scPl), 224},
		{"scSock", unsafe.Offsetof(s.scSock), 232},
		{"scMsg", unsafe.Offsetof(s.scMsg), 240},
		{"scFD", unsafe.Offsetof(s.scFD), 248},
		{"llFD", unsafe.Offsetof(s.llFD), 256},
		{"llFl", unsafe.Offsetof(s.llFl), 264},
		{"plain", unsafe.Offsetof(s.plain), 272},
	} {
		assert.Equal(t, c.want, c.got, c.name)
	}
	assert.Equal(t, uintptr(88), unsafe.Sizeof(s.args), "struct clone_args, version 2")
}
