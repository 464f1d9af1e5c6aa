// SPDX-License-Identifier: MIT

package fledgev1

import (
	"testing"

	"github.com/fledgehq/fledge/plugin"
	"github.com/stretchr/testify/require"
)

func newTestStore(t *testing.T, path string) StateStore {
	t.Helper()
	s, err := plugin.OpenStore(path, plugin.DefaultStoreLimits)
	require.NoError(t, err)
	return s
}
