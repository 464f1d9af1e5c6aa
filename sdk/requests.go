// SPDX-License-Identifier: MIT

package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/ui/clip"
)

// Log levels.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Prompt validators fledge applies before answering.
const (
	ValidateNonEmpty   = "non_empty"
	ValidateInteger    = "integer"
	ValidatePathExists = "path_exists"
	ValidateURL        = "url"
)

// ---- fire and forget ----

// Output writes text verbatim to the user's stdout (the plugin's main output).
func (p *Plugin) Output(text string) error { return p.send(protocol.Output{Text: text}) }

// Log emits a diagnostic at level (LevelDebug ... LevelError).
func (p *Plugin) Log(level, message string) error {
	return p.send(protocol.Log{Level: level, Message: message})
}

// Progress shows a progress bar at current of total.
func (p *Plugin) Progress(message string, current, total float64) error {
	return p.send(protocol.Progress{Message: message, Current: &current, Total: &total})
}

// Spinner shows a spinner with message (progress without numbers).
func (p *Plugin) Spinner(message string) error {
	return p.send(protocol.Progress{Message: message})
}

// ProgressDone clears the progress display.
func (p *Plugin) ProgressDone() error { return p.send(protocol.Progress{Done: true}) }

// Store persists key=value in the plugin's storage (needs the store capability; without it
// fledge drops the value silently, as the spec says).
func (p *Plugin) Store(key, value string) error {
	return p.send(protocol.Store{Key: key, Value: value})
}

// ---- blocking calls ----

// PromptOption configures Prompt.
type PromptOption func(*protocol.Prompt)

// PromptDefault pre-fills the answer (also the answer in non-interactive runs).
func PromptDefault(s string) PromptOption { return func(m *protocol.Prompt) { m.Default = &s } }

// PromptValidate asks fledge to validate the answer (Validate* constants).
func PromptValidate(v string) PromptOption { return func(m *protocol.Prompt) { m.Validate = v } }

// Prompt asks for text input.
func (p *Plugin) Prompt(ctx context.Context, message string, opts ...PromptOption) (string, error) {
	raw, err := p.call(ctx, func(id protocol.ID) any {
		m := protocol.Prompt{ID: id, Message: message}
		for _, o := range opts {
			o(&m)
		}
		return m
	})
	if err != nil {
		return "", err
	}
	return decodeValue[string](raw, "prompt")
}

// ConfirmOption configures Confirm.
type ConfirmOption func(*protocol.Confirm)

// ConfirmDefault sets the default answer.
func ConfirmDefault(b bool) ConfirmOption { return func(m *protocol.Confirm) { m.Default = &b } }

// Confirm asks a yes/no question.
func (p *Plugin) Confirm(ctx context.Context, message string, opts ...ConfirmOption) (bool, error) {
	raw, err := p.call(ctx, func(id protocol.ID) any {
		m := protocol.Confirm{ID: id, Message: message}
		for _, o := range opts {
			o(&m)
		}
		return m
	})
	if err != nil {
		return false, err
	}
	return decodeValue[bool](raw, "confirm")
}

// SelectOption configures Select.
type SelectOption func(*protocol.Select)

// SelectDefault sets the index selected by default.
func SelectDefault(i int) SelectOption { return func(m *protocol.Select) { m.Default = &i } }

// Select asks to choose one of options; it returns the index and the string chosen.
func (p *Plugin) Select(ctx context.Context, message string, options []string, opts ...SelectOption) (int, string, error) {
	raw, err := p.call(ctx, func(id protocol.ID) any {
		m := protocol.Select{ID: id, Message: message, Options: options}
		for _, o := range opts {
			o(&m)
		}
		return m
	})
	if err != nil {
		return -1, "", err
	}
	idx, err := choiceIndex(raw, options, nil)
	if err != nil {
		return -1, "", fmt.Errorf("%w: select: %w", ErrBadResponse, err)
	}
	return idx, options[idx], nil
}

// MultiSelectOption configures MultiSelect.
type MultiSelectOption func(*protocol.MultiSelect)

// MultiSelectDefaults sets the indices selected by default.
func MultiSelectDefaults(idx ...int) MultiSelectOption {
	return func(m *protocol.MultiSelect) { m.Defaults = idx }
}

// MultiSelect asks to choose any of options; it returns the indices and strings chosen.
func (p *Plugin) MultiSelect(ctx context.Context, message string, options []string, opts ...MultiSelectOption) ([]int, []string, error) {
	if options == nil {
		options = []string{}
	}
	raw, err := p.call(ctx, func(id protocol.ID) any {
		m := protocol.MultiSelect{ID: id, Message: message, Options: options}
		for _, o := range opts {
			o(&m)
		}
		return m
	})
	if err != nil {
		return nil, nil, err
	}
	items, err := decodeValue[[]json.RawMessage](raw, "multi_select")
	if err != nil {
		return nil, nil, err
	}
	used := make([]bool, len(options))
	idx := make([]int, 0, len(items))
	chosen := make([]string, 0, len(items))
	for _, it := range items {
		i, err := choiceIndex(it, options, used)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: multi_select: %w", ErrBadResponse, err)
		}
		used[i] = true
		idx = append(idx, i)
		chosen = append(chosen, options[i])
	}
	return idx, chosen, nil
}

// choiceIndex maps an answer to an option index. The spec answers with the option's text;
// an index number is accepted too. With used set, a repeated option text maps to its next
// unused occurrence.
func choiceIndex(raw json.RawMessage, options []string, used []bool) (int, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		for i, o := range options {
			if o == s && (used == nil || !used[i]) {
				return i, nil
			}
		}
		return -1, fmt.Errorf("answer %q is not one of the options", s)
	}
	var i int
	if err := json.Unmarshal(raw, &i); err == nil {
		if i < 0 || i >= len(options) {
			return -1, fmt.Errorf("answer index %d out of range", i)
		}
		return i, nil
	}
	return -1, fmt.Errorf("answer %s is neither an option nor an index", clip.Bytes(string(raw), 64))
}

// Load reads key from the plugin's storage; ok is false when it is not set (or the store
// capability was not granted).
func (p *Plugin) Load(ctx context.Context, key string) (value string, ok bool, err error) {
	raw, err := p.call(ctx, func(id protocol.ID) any { return protocol.Load{ID: id, Key: key} })
	if err != nil {
		return "", false, err
	}
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	v, err := decodeValue[string](raw, "load")
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

// ExecOption configures Exec.
type ExecOption func(*protocol.Exec)

// ExecCwd runs the command in dir, relative to the project root.
func ExecCwd(dir string) ExecOption { return func(m *protocol.Exec) { m.Cwd = dir } }

// ExecTimeout sets the time after which fledge kills the command (default 30 s, at most 300).
func ExecTimeout(d time.Duration) ExecOption {
	return func(m *protocol.Exec) { s := d.Seconds(); m.Timeout = &s }
}

// Exec asks fledge to run a shell command (needs the exec capability; without it the result
// has code 126 and the reason in Stderr). A non-zero exit is a result, not an error.
func (p *Plugin) Exec(ctx context.Context, command string, opts ...ExecOption) (*protocol.ExecResult, error) {
	raw, err := p.call(ctx, func(id protocol.ID) any {
		m := protocol.Exec{ID: id, Command: command}
		for _, o := range opts {
			o(&m)
		}
		return m
	})
	if err != nil {
		return nil, err
	}
	res, err := decodeValue[protocol.ExecResult](raw, "exec")
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// Metadata asks for project metadata (fledge_config, git_tags, git_status, git_log, env).
// Unknown keys come back as null; without the metadata capability the map is empty.
func (p *Plugin) Metadata(ctx context.Context, keys ...string) (map[string]json.RawMessage, error) {
	if keys == nil {
		keys = []string{}
	}
	raw, err := p.call(ctx, func(id protocol.ID) any { return protocol.Metadata{ID: id, Keys: keys} })
	if err != nil {
		return nil, err
	}
	return decodeValue[map[string]json.RawMessage](raw, "metadata")
}
