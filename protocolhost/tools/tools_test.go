// SPDX-License-Identifier: MIT

package tools

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	tool := &Tool{Name: "plugin_p_t", Params: []Param{
		{Name: "path", Type: "string", Required: true},
		{Name: "count", Type: "integer"},
		{Name: "ratio", Type: "number"},
		{Name: "deep", Type: "boolean"},
	}}
	for _, tc := range []struct {
		name string
		args map[string]any
		err  string
	}{
		{"ok", map[string]any{"path": "a", "count": float64(3), "ratio": 0.5, "deep": true}, ""},
		{"missing required", map[string]any{"count": float64(1)}, `missing required parameter "path"`},
		{"wrong type", map[string]any{"path": 3.0}, `parameter "path" must be string, got number`},
		{"not an integer", map[string]any{"path": "a", "count": 1.5}, `parameter "count" must be integer`},
		{"unknown", map[string]any{"path": "a", "colour": "red"}, `unknown parameter "colour"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tool, tc.args)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrBadArguments)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestSchemaFromParams(t *testing.T) {
	s := Schema(&Tool{Params: []Param{{Name: "q", Type: "string", Description: "query", Required: true}, {Name: "n", Type: "integer"}}})
	var got map[string]any
	require.NoError(t, json.Unmarshal(s, &got))
	assert.Equal(t, "object", got["type"])
	assert.Equal(t, []any{"q"}, got["required"])
	assert.Equal(t, map[string]any{"type": "string", "description": "query"}, got["properties"].(map[string]any)["q"])
}
