// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// hostile installs testdata/hostile.mjs in one of its modes as plugin hostile-<mode>, with
// a short timeout_default so a server that never answers is given up on quickly.
func hostile(t *testing.T, mode string) *fixture {
	t.Helper()
	testutil.RequireContained(t)
	f := newFixture(t, func(c *policy.Config) { c.Sandbox.TimeoutDefault = 3 * time.Second })
	src := f.mcpPlugin("hostile-"+mode, "", "hostile.mjs", mode)
	copyFile(t, filepath.Join("testdata", "hostile.mjs"), filepath.Join(src, "hostile.mjs"), 0o755)
	f.install(src)
	return f
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// A server that never answers initialize is given up on after timeout_default, with a
// message that says so, and ended.
func TestHostileNeverInitializes(t *testing.T) {
	f := hostile(t, "silent")
	ctx := context.Background()
	cat := f.catalogue()
	assert.Empty(t, cat.List(ctx))
	require.Contains(t, cat.Errors, "hostile-silent")
	assert.Contains(t, cat.Errors["hostile-silent"], "did not answer initialize within 3s")
	_, _, err := cat.Call(ctx, "plugin_hostile-silent_poke", nil)
	require.ErrorIs(t, err, ErrHandshake)

	exits := f.records(audit.EventPluginExit)
	require.Len(t, exits, 2, "each attempt's server was ended and recorded")
	assert.Contains(t, exits[0].Details["handshake_error"], "initialize")
	limits := f.records(audit.EventLimit)
	require.NotEmpty(t, limits)
	assert.Equal(t, string(reason.HandshakeFailed), limits[0].Reason)
}

// Notifications faster than the bound end the session with a clear error instead of
// piling up in the SDK's unbounded queue.
func TestHostileFloodsNotifications(t *testing.T) {
	f := hostile(t, "flood")
	ctx := context.Background()
	cat := f.catalogue()
	require.Len(t, cat.List(ctx), 1)
	before := heapAfterGC()
	_, res, err := cat.Call(ctx, "plugin_hostile-flood_poke", nil)
	require.NoError(t, err)
	assert.False(t, res.Success)
	assert.Equal(t, reason.LimitExceeded, res.Reason)
	assert.Contains(t, res.Message, "flooded fledge")
	// The SDK decodes each message with a fresh 64 KiB buffer (garbage, not growth); what
	// must not grow is what stays: nothing queued is left behind.
	assert.Less(t, int64(heapAfterGC())-int64(before), int64(32<<20), "memory stays bounded")
	outs := f.records(audit.EventToolOutcome)
	require.Len(t, outs, 1)
	assert.Equal(t, string(reason.LimitExceeded), outs[0].Reason)
	exits := f.records(audit.EventPluginExit)
	require.Len(t, exits, 1, "the flooding server was ended at once")
	assert.Contains(t, exits[0].Details["ended_by_fledge"], "flooded")
}

// An answer to an id fledge never sent is a protocol violation: the call fails with a
// clear error at once rather than waiting for its timeout.
func TestHostileWrongIDs(t *testing.T) {
	f := hostile(t, "wrongid")
	ctx := context.Background()
	cat := f.catalogue()
	require.Len(t, cat.List(ctx), 1)
	_, res, err := cat.Call(ctx, "plugin_hostile-wrongid_poke", nil)
	require.NoError(t, err)
	assert.False(t, res.Success)
	assert.Equal(t, reason.MalformedResponse, res.Reason)
	assert.Contains(t, res.Message, "answered a request fledge never sent")
	assert.NotContains(t, res.Message, "timed out")
}

// A 50 MiB line is never held: it ends the session at line_max (1 MiB) with a clear error,
// and fledge allocates far less than the line while skipping it.
func TestHostileHugeLine(t *testing.T) {
	f := hostile(t, "bigline")
	ctx := context.Background()
	cat := f.catalogue()
	require.Len(t, cat.List(ctx), 1)
	before := totalAlloc()
	_, res, err := cat.Call(ctx, "plugin_hostile-bigline_poke", nil)
	require.NoError(t, err)
	grew := totalAlloc() - before
	assert.False(t, res.Success)
	assert.Equal(t, reason.LimitExceeded, res.Reason)
	assert.Contains(t, res.Message, "longer than line_max (1048576 bytes)")
	assert.Less(t, grew, uint64(25<<20), "a 50 MiB line must not be held (allocated %d bytes)", grew)
}

// A call the server never answers times out after timeout_default, and the server is told
// on the wire (notifications/cancelled).
func TestHostileNeverAnswersCall(t *testing.T) {
	f := hostile(t, "slow")
	ctx := context.Background()
	cat := f.catalogue()
	require.Len(t, cat.List(ctx), 1)
	_, res, err := cat.Call(ctx, "plugin_hostile-slow_poke", nil)
	require.NoError(t, err)
	assert.False(t, res.Success)
	assert.Equal(t, reason.Timeout, res.Reason)
	assert.Contains(t, res.Message, "timed out: plugin_hostile-slow_poke after 3s")
	require.Eventually(t, func() bool {
		return strings.Contains(f.pluginLog("hostile-slow"), "hostile: cancelled request")
	}, 10*time.Second, 50*time.Millisecond, "the server is sent notifications/cancelled")
	outs := f.records(audit.EventToolOutcome)
	require.Len(t, outs, 1)
	assert.Equal(t, string(reason.Timeout), outs[0].Reason)
}

// fledge answers what a client must: a server that pings fledge in the middle of a call
// gets its pong, and the call completes.
func TestServerPingsFledge(t *testing.T) {
	f := hostile(t, "pinger")
	ctx := context.Background()
	cat := f.catalogue()
	require.Len(t, cat.List(ctx), 1)
	_, res, err := cat.Call(ctx, "plugin_hostile-pinger_poke", nil)
	require.NoError(t, err)
	require.True(t, res.Success, res.Message)
	assert.Equal(t, `"fledge answered my ping"`, string(res.Output))
}
