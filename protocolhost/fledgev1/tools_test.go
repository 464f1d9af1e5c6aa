// SPDX-License-Identifier: MIT

package fledgev1

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/ui"
)

func TestArgv(t *testing.T) {
	decl := []plugin.Arg{
		{Name: "name", Type: "string", Required: true},
		{Name: "shout", Type: "boolean"},
		{Name: "times", Type: "integer", Default: int64(1)},
		{Name: "ratio", Type: "number"},
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string
		err  string
	}{
		{"declaration order, defaults filled", map[string]any{"ratio": 0.5, "name": "Ada"}, []string{"--name=Ada", "--times=1", "--ratio=0.5"}, ""},
		{"boolean true is a flag", map[string]any{"name": "a b", "shout": true, "times": float64(3)}, []string{"--name=a b", "--shout", "--times=3"}, ""},
		{"boolean false is left out", map[string]any{"name": "x", "shout": false}, []string{"--name=x", "--times=1"}, ""},
		{"json numbers", map[string]any{"name": "x", "times": json.Number("7")}, []string{"--name=x", "--times=7"}, ""},
		{"objects have no argv form", map[string]any{"name": map[string]any{"a": 1.0}}, nil, `argument "name": a object cannot be passed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Argv(decl, tc.args)
			if tc.err != "" {
				require.ErrorIs(t, err, tools.ErrBadArguments)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCaptureUIDefaultsOrRefuses(t *testing.T) {
	c := newCaptureUI("p", nil, 8)
	def := "blue"
	got, err := c.Prompt(t.Context(), promptReq("colour?", &def))
	require.NoError(t, err)
	assert.Equal(t, "blue", got)
	assert.Empty(t, c.refused())
	_, err = c.Prompt(t.Context(), promptReq("name?", nil))
	require.Error(t, err)
	assert.Equal(t, `prompt "name?"`, c.refused())
	ok, err := c.Confirm(t.Context(), "p", "sure?", nil)
	require.NoError(t, err)
	assert.False(t, ok, "a confirm without default is false, as under --ni")
	picked, err := c.MultiSelect(t.Context(), "p", "which?", []string{"a", "b"}, nil)
	require.NoError(t, err)
	assert.Empty(t, picked)
	_, err = c.Select(t.Context(), "p", "one?", []string{"a"}, nil)
	require.Error(t, err)
	assert.Equal(t, `prompt "name?"`, c.refused(), "the first refused question is the one reported")
	c.Output("0123456789")
	out, truncated := c.output()
	assert.Equal(t, "01234567", out, "output is bounded")
	assert.True(t, truncated)
}

func promptReq(msg string, def *string) ui.PromptRequest {
	return ui.PromptRequest{Plugin: "p", Message: msg, Default: def}
}

// Served as MCP tools, a fledge-v1 command's prompt default is validated as under --ni: a
// default that fails the prompt's validator is an invalid request, not the answer.
func TestCaptureUIValidatesDefaults(t *testing.T) {
	c := newCaptureUI("p", nil, 8)
	bad, good := "abc", "3"
	_, err := c.Prompt(t.Context(), ui.PromptRequest{Plugin: "p", Message: "n?", Default: &bad, Validate: ui.ValidateInteger})
	require.ErrorIs(t, err, ui.ErrInvalidRequest)
	got, err := c.Prompt(t.Context(), ui.PromptRequest{Plugin: "p", Message: "n?", Default: &good, Validate: ui.ValidateInteger})
	require.NoError(t, err)
	assert.Equal(t, "3", got)
	_, err = c.Prompt(t.Context(), ui.PromptRequest{Plugin: "p", Message: "n?", Default: &good, Validate: "email"})
	require.ErrorIs(t, err, ui.ErrInvalidRequest, "an unknown validator is refused, as on the console")
}
