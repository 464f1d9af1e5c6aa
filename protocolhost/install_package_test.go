// SPDX-License-Identifier: MIT

package protocolhost

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/plugin"
)

// answer is a user at a terminal giving one answer to every question.
type answer struct {
	yes       bool
	questions []string
}

func (a *answer) Confirm(q string, def bool) (bool, error) {
	a.questions = append(a.questions, q)
	if def {
		return false, errors.New("an update's changes are never approved by default")
	}
	return a.yes, nil
}

// An npm update that would start the server differently from how the user asked for it is
// listed and asked on a terminal (default no); --yes and --ni refuse it; a record fledge
// cannot trust lists everything for the user to confirm once.
func TestApproveRequestAsksOrRefuses(t *testing.T) {
	approved := &plugin.NPMRequest{Package: "srv", Version: "^1", Filesystem: "none"}
	next := *approved
	next.Env = []string{"INJECTED=from-server-json"}

	var out bytes.Buffer
	in := &installer{errOut: &out}
	yes := &answer{yes: true}
	require.NoError(t, in.approveRequest("srv", approved, &next, plugin.InstallOptions{Asker: yes}))
	assert.Equal(t, []string{"Update srv with these?"}, yes.questions)
	assert.Contains(t, out.String(), `environment: "INJECTED=from-server-json" (was none)`)

	err := in.approveRequest("srv", approved, &next, plugin.InstallOptions{Asker: &answer{}})
	assert.ErrorIs(t, err, errDeclined)
	for _, o := range []plugin.InstallOptions{{Asker: yes, Yes: true}, {Asker: yes, NonInteractive: true}, {}} {
		err := in.approveRequest("srv", approved, &next, o)
		require.ErrorIs(t, err, plugin.ErrUnapprovedChange)
		assert.Contains(t, err.Error(), "run `fledge plugins update srv` on a terminal")
	}
	assert.Len(t, yes.questions, 1, "--yes and --ni ask nothing")

	same := *approved
	require.NoError(t, in.approveRequest("srv", approved, &same, plugin.InstallOptions{Yes: true}), "nothing new: nothing to approve")

	out.Reset()
	require.ErrorIs(t, in.approveRequest("srv", nil, &same, plugin.InstallOptions{Yes: true}), plugin.ErrUnapprovedChange)
	assert.Contains(t, out.String(), "kept by an older fledge inside its plugin dir")
	assert.Contains(t, out.String(), "version: ^1")
}
