// SPDX-License-Identifier: MIT

package mcp

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	_ "github.com/fledgehq/fledge/protocolhost/fledgev1" // registers the fledge-v1 tools provider
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// fledge-v1 commands that declare typed args are tools: a call runs the command once,
// confined and non-interactive, and its output messages are the result.
func TestFledgeV1CommandsAsTools(t *testing.T) {
	nodePath(t)
	f := newFixture(t, nil)
	src, err := filepath.Abs(filepath.Join("testdata", "greet"))
	require.NoError(t, err)
	f.install(src)
	ctx := context.Background()
	cat := f.catalogue()
	list := cat.List(ctx)
	require.Empty(t, cat.Errors)
	require.Len(t, list, 2)
	greet := findTool(t, list, "plugin_greet_greet")
	assert.Equal(t, "fledge-v1", greet.Protocol)
	assert.Equal(t, []tools.Param{
		{Name: "name", Type: "string", Description: "who to greet", Required: true},
		{Name: "shout", Type: "boolean", Description: "in capitals"},
		{Name: "times", Type: "integer", Description: "how many greetings"},
	}, greet.Params)

	_, res, err := cat.Call(ctx, greet.Name, map[string]any{"name": "Ada", "shout": true, "times": float64(2)})
	require.NoError(t, err)
	require.True(t, res.Success, "%s: %s", res.Message, f.stderr.String())
	assert.Equal(t, "HELLO, ADA!\nHELLO, ADA!\n", outputText(t, res))

	_, res, err = cat.Call(ctx, greet.Name, map[string]any{"name": "Bo"})
	require.NoError(t, err)
	assert.Equal(t, "Hello, Bo!\n", outputText(t, res), "times takes its default")

	_, _, err = cat.Call(ctx, greet.Name, map[string]any{"shout": true})
	require.ErrorIs(t, err, tools.ErrBadArguments, "a missing required arg fails before anything runs")

	// A question without a default cannot be answered by anyone: the call fails.
	_, res, err = cat.Call(ctx, "plugin_greet_ask", map[string]any{"topic": "colours"})
	require.NoError(t, err)
	assert.False(t, res.Success)
	assert.Equal(t, reason.NonInteractive, res.Reason)
	assert.Contains(t, res.Message, `prompt "Favourite colour?"`)

	calls := f.records(audit.EventToolCall)
	require.Len(t, calls, 4)
	// The call with a missing argument: refused before anything ran, and on record.
	assert.Equal(t, audit.Deny, calls[2].Decision)
	assert.Equal(t, string(reason.BadArguments), calls[2].Reason)
	calls = append(calls[:2], calls[3])
	assert.Equal(t, []any{"name", "shout", "times"}, calls[0].Details["argument_keys"])
	assert.NotContains(t, calls[0].Details, "arguments")
	outs := f.records(audit.EventToolOutcome)
	require.Len(t, outs, 3)
	assert.Equal(t, string(reason.NonInteractive), outs[2].Reason)
	assert.Len(t, f.records(audit.EventPluginStart), 3, "each call is its own confined session")
}
