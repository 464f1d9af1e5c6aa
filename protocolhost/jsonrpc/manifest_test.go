// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

func TestParseManifestDefaults(t *testing.T) {
	m, err := ParseManifest([]byte(`{"name":"tiny"}`))
	require.NoError(t, err)
	assert.Equal(t, &Manifest{Name: "tiny", Version: "0.0.0", Description: "", Hooks: []string{}, Tools: []Tool{}, Priority: 500}, m)
}

func TestParseManifestSeedExample(t *testing.T) {
	// The spec's own example manifest, verbatim.
	m, err := ParseManifest([]byte(`{
  "name":"my-plugin",
  "version":"1.0.0",
  "description":"What this plugin does",
  "hooks":["context_enhance","post_user_input"],
  "tools":[
    {
      "name":"my_tool",
      "description":"What the tool does",
      "parameters":[
        {"name":"query","type":"string","description":"Search query","required":true},
        {"name":"limit","type":"number","description":"Max results","required":false}
      ]
    }
  ],
  "priority":500
}`))
	require.NoError(t, err)
	assert.Equal(t, "my-plugin", m.Name)
	assert.Equal(t, []string{"context_enhance", "post_user_input"}, m.Hooks)
	require.Len(t, m.Tools, 1)
	assert.Equal(t, []tools.Param{
		{Name: "query", Type: "string", Description: "Search query", Required: true},
		{Name: "limit", Type: "number", Description: "Max results"},
	}, m.Tools[0].Parameters)
	assert.True(t, m.Subscribes("post_user_input"))
	assert.False(t, m.Subscribes("pre_tool_execute"))
	assert.NotNil(t, m.Tool("my_tool"))

	// The recorded form decodes to the same manifest.
	back, err := DecodeRecorded(m.Encode())
	require.NoError(t, err)
	assert.True(t, back.Same(m))
}

func TestParseManifestRefusals(t *testing.T) {
	many := make([]string, MaxTools+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"name":"t%d"}`, i)
	}
	for _, tc := range []struct {
		name, json, want string
	}{
		{"missing name", `{"version":"1"}`, "name is required"},
		{"empty name", `{"name":""}`, "name is required"},
		{"underscore", `{"name":"my_plugin"}`, "contains an underscore"},
		{"not a fledge name", `{"name":"My Plugin"}`, "must match"},
		{"name not a string", `{"name":5}`, "not a manifest object"},
		{"not an object", `[1,2]`, "not a manifest object"},
		{"fractional priority", `{"name":"a","priority":1.5}`, "priority 1.5 must be an integer"},
		{"huge priority", `{"name":"a","priority":1e12}`, "must be an integer"},
		{"control chars", `{"name":"a","description":"x\u001b[2J"}`, "control characters"},
		{"bad hook", `{"name":"a","hooks":["a/b"]}`, "hook name"},
		{"tool without name", `{"name":"a","tools":[{"description":"d"}]}`, "tool 1: name \"<missing>\""},
		{"tool name with space", `{"name":"a","tools":[{"name":"do it"}]}`, "must match"},
		{"duplicate tool", `{"name":"a","tools":[{"name":"x"},{"name":"x"}]}`, "declared twice"},
		{"param without name", `{"name":"a","tools":[{"name":"x","parameters":[{"type":"string"}]}]}`, "no usable name"},
		{"required not bool", `{"name":"a","tools":[{"name":"x","parameters":[{"name":"p","required":"yes"}]}]}`, "required must be true or false"},
		{"too many tools", `{"name":"a","tools":[` + strings.Join(many, ",") + `]}`, "more than the 256 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.json))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrManifest)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestApplyAnswer(t *testing.T) {
	raw := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(s), &m))
		return m
	}
	for _, tc := range []struct {
		name, hook string
		data       map[string]any
		answer     string
		wantAction string
		wantData   map[string]any
		wantMsg    string
	}{
		{"continue modifies", HookPostUserInput, map[string]any{"message": "a"}, `{"action":"continue","message":"b"}`, ActionContinue, map[string]any{"message": "b"}, ""},
		{"no action is continue", HookContextEnhance, map[string]any{"dynamic_context": "x"}, `{"dynamic_context":"x y"}`, ActionContinue, map[string]any{"dynamic_context": "x y"}, ""},
		{"stop ignored for context_enhance", HookContextEnhance, map[string]any{"dynamic_context": "x"}, `{"action":"stop","dynamic_context":"z"}`, ActionContinue, map[string]any{"dynamic_context": "z"}, "ignored for context_enhance"},
		{"skip only for post_user_input", "pre_llm_send", map[string]any{"base_prompt": "p"}, `{"action":"skip"}`, ActionContinue, map[string]any{"base_prompt": "p"}, "only for post_user_input"},
		{"skip on post_user_input", HookPostUserInput, map[string]any{"message": "m"}, `{"action":"skip"}`, ActionSkip, map[string]any{"message": "m"}, ""},
		{"unknown action", HookPostUserInput, map[string]any{"message": "m"}, `{"action":"explode"}`, ActionContinue, map[string]any{"message": "m"}, "unknown action"},
		{"keys the event lacks are ignored", HookPostUserInput, map[string]any{"message": "m"}, `{"message":"n","injected":"x"}`, ActionContinue, map[string]any{"message": "n"}, "injected"},
		{"type changes are ignored", HookPostUserInput, map[string]any{"message": "m"}, `{"message":{"evil":true}}`, ActionContinue, map[string]any{"message": "m"}, "message"},
		{"stop on pre_tool_execute", HookPreToolExecute, map[string]any{"tool_name": "w"}, `{"action":"stop","result":"blocked"}`, ActionStop, map[string]any{"tool_name": "w"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &HookResult{Hook: tc.hook, Data: copyMap(tc.data)}
			var step HookStep
			got := applyAnswer(tc.hook, res, raw(tc.answer), &step)
			assert.Equal(t, tc.wantAction, got)
			assert.Equal(t, tc.wantData, res.Data)
			if tc.wantMsg == "" {
				assert.Empty(t, step.Message)
			} else {
				assert.Contains(t, step.Message, tc.wantMsg)
			}
		})
	}
}

func TestCombined(t *testing.T) {
	r := &HookResult{Action: ActionStop, Data: map[string]any{"tool_name": "w"}, Result: json.RawMessage(`"{\"error\":\"blocked\"}"`)}
	b, err := json.Marshal(r.Combined())
	require.NoError(t, err)
	assert.JSONEq(t, `{"action":"stop","tool_name":"w","result":"{\"error\":\"blocked\"}"}`, string(b))
}

func TestParseID(t *testing.T) {
	for in, want := range map[string]int64{`7`: 7, `"12"`: 12} {
		id, ok := parseID(json.RawMessage(in))
		assert.True(t, ok, in)
		assert.Equal(t, want, id)
	}
	for _, in := range []string{`null`, `1.5`, `"x"`, `{}`} {
		_, ok := parseID(json.RawMessage(in))
		assert.False(t, ok, in)
	}
}

func TestReasonOf(t *testing.T) {
	for err, want := range map[error]reason.Code{
		nil: reason.OK,
		fmt.Errorf("%w: %w", ErrHandshake, ErrTimeout): reason.HandshakeFailed,
		fmt.Errorf("x: %w", ErrTimeout):                reason.Timeout,
		ErrGone:                                        reason.Crashed,
		ErrLimit:                                       reason.LimitExceeded,
		&RPCError{Code: -32601, Message: "no"}:         reason.MalformedMessage,
		errors.New("other"):                            reason.LaunchFailed,
	} {
		assert.Equal(t, want, ReasonOf(err), fmt.Sprint(err))
	}
}

func TestManifestDiff(t *testing.T) {
	a, err := ParseManifest([]byte(`{"name":"p","hooks":["h1"],"tools":[{"name":"x"},{"name":"y","parameters":[{"name":"q"}]}]}`))
	require.NoError(t, err)
	b, err := ParseManifest([]byte(`{"name":"p","priority":1,"hooks":["h1","h2"],"tools":[{"name":"y","parameters":[{"name":"q","required":true}]},{"name":"z"}]}`))
	require.NoError(t, err)
	assert.Equal(t, "priority 500 -> 1; hooks [h1] -> [h1, h2]; tool y changed; new tool z; tool x gone", a.Diff(b))
	assert.Equal(t, "no difference", a.Diff(a))
}
