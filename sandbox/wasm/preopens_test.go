// SPDX-License-Identifier: MIT

package wasm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox/wasm"
)

// A module granted project-rw sees the project read-only, as with project: a preopen is
// no mount, so the git metadata a native plugin's writable project keeps read-only could
// not be kept so here.
func TestPreopensProjectRWIsReadOnly(t *testing.T) {
	for _, level := range []string{policy.FilesystemProject, policy.FilesystemProjectRW} {
		o := wasm.Options{Grants: protocol.Capabilities{Filesystem: level}, ProjectRoot: "/work/proj", DataDir: "/cfg/plugins/p/data"}
		assert.Equal(t, []wasm.Preopen{
			{Guest: "/project", Host: "/work/proj", ReadOnly: true},
			{Guest: "/plugin", Host: "/cfg/plugins/p/data"},
		}, o.Preopens(), level)
	}
}
