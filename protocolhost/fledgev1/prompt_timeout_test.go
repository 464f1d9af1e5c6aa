// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/ui"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// silentUI is a terminal nobody types at: every prompt waits until its context ends.
type silentUI struct{ ui.UI }

func (silentUI) Interactive() bool { return true }
func (silentUI) Prompt(ctx context.Context, _ ui.PromptRequest) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// After a prompt times out, the cancel (reason timeout) ends the session as the
// spec's invariant 10 says: a plugin that ignores it and SIGTERM is SIGKILLed by the ladder.
func TestPromptTimeoutEscalates(t *testing.T) {
	f := newFixture(t, "stubborn_prompt.sh", protocol.Capabilities{})
	f.opts.UI = silentUI{f.opts.UI}
	f.opts.Limits.PromptTimeout = 300 * time.Millisecond
	f.opts.Limits.CancelGrace = 200 * time.Millisecond
	f.opts.Limits.KillAfter = 600 * time.Millisecond

	done := make(chan *Outcome, 1)
	go func() { done <- f.run() }()
	var out *Outcome
	select {
	case out = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin ignoring the timeout cancel was not ended within 10 s")
	}
	got, err := os.ReadFile(filepath.Join(f.dataDir, "cancel"))
	require.NoError(t, err, "the plugin saw the cancel")
	assert.Contains(t, string(got), `"reason":"timeout"`)
	require.NotNil(t, out.Result)
	assert.Equal(t, "SIGKILL", out.Result.Signal, "it ignored SIGTERM, so only SIGKILL ended it")
	assert.False(t, out.Interrupted, "a timeout is not a user interrupt")

	exits := f.findRecords(audit.EventPluginExit)
	require.Len(t, exits, 1)
	assert.Equal(t, "timeout", exits[0].Reason)
	assert.Equal(t, "timeout", exits[0].Details["stopped_by"])
}
