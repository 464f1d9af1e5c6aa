// SPDX-License-Identifier: MIT

package ui

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"charm.land/huh/v2"

	"github.com/fledgehq/fledge/ui/clip"
)

// DefaultAnswer is a prompt's default taken as the answer where nobody can type one (--ni):
// it passes the prompt's validator like a typed answer, or the request is invalid (an
// "integer" prompt whose default is "abc" gets an error reply, never "abc" as its answer).
func DefaultAnswer(req PromptRequest, check func(string) error) (string, error) {
	if err := check(*req.Default); err != nil {
		return "", fmt.Errorf("%w: the default %q fails the prompt's own %s validator: %v",
			ErrInvalidRequest, clip.Mark(oneLine(plainText(*req.Default)), 64, "…"), req.Validate, err)
	}
	return *req.Default, nil
}

// Prompt implements UI. Non-interactive: the default, else ErrNonInteractive.
// Interactively, as the Rust fledge host does: the default is shown (a placeholder in the form,
// in the question line in accessible mode), typed text replaces it, Enter alone takes it.
func (c *console) Prompt(ctx context.Context, req PromptRequest) (string, error) {
	check, err := Validator(req.Validate)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if !c.interactive {
		if req.Default != nil {
			return DefaultAnswer(req, check)
		}
		return "", ErrNonInteractive
	}
	val := ""
	title := questionTitle(req.Plugin, req.Message)
	field := huh.NewInput()
	if req.Default != nil {
		shown := clip.Mark(oneLine(plainText(*req.Default)), MaxLineBytes, "…")
		field.Placeholder(shown)
		if c.accessible {
			// The line-based form draws no placeholder: the default goes in the question.
			title += " [" + shown + "]"
		}
	}
	field = field.
		Title(title).
		Value(&val).
		CharLimit(maxAnswerBytes).
		Validate(func(s string) error {
			if s == "" && req.Default != nil {
				s = *req.Default
			}
			return check(s)
		})
	answer := func() string {
		if val == "" && req.Default != nil {
			val = *req.Default
		}
		return val
	}
	if err := c.runForm(ctx, field, func() string { return echoLine(req.Plugin, req.Message, answer()) }); err != nil {
		return "", err
	}
	return answer(), nil
}

// Confirm implements UI. Non-interactive: the default, else false.
func (c *console) Confirm(ctx context.Context, plugin, message string, def *bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	val := def != nil && *def
	if !c.interactive {
		return val, nil
	}
	field := huh.NewConfirm().Title(questionTitle(plugin, message)).Affirmative("Yes").Negative("No").Value(&val)
	if err := c.runForm(ctx, field, func() string {
		return echoLine(plugin, message, map[bool]string{true: "yes", false: "no"}[val])
	}); err != nil {
		return false, err
	}
	return val, nil
}

// Select implements UI and returns the chosen index. Non-interactive: the default, else
// ErrNonInteractive; never a silent first option.
func (c *console) Select(ctx context.Context, plugin, message string, options []string, def *int) (int, error) {
	if err := checkOptions(options); err != nil {
		return 0, err
	}
	if def != nil && (*def < 0 || *def >= len(options)) {
		return 0, fmt.Errorf("%w: default index %d outside 0..%d", ErrInvalidRequest, *def, len(options)-1)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !c.interactive {
		if def == nil {
			return 0, ErrNonInteractive
		}
		return *def, nil
	}
	field := huh.NewSelect[int]().Title(questionTitle(plugin, message)).Options(optionList(options)...)
	if def != nil {
		val := *def
		field.Value(&val) // pre-selects the default (and lets accessible mode offer it)
	}
	if len(options) > visibleOptions {
		field.Height(visibleOptions + 2)
	}
	if err := c.runForm(ctx, field, func() string {
		if idx, ok := field.GetValue().(int); ok && idx >= 0 && idx < len(options) {
			return echoLine(plugin, message, options[idx])
		}
		return ""
	}); err != nil {
		return 0, err
	}
	idx, ok := field.GetValue().(int)
	if !ok || idx < 0 || idx >= len(options) {
		return 0, fmt.Errorf("ui: select returned %v", field.GetValue())
	}
	return idx, nil
}

// MultiSelect implements UI and returns the chosen indices in ascending order.
// Non-interactive: the defaults, else an empty (non-nil) list.
func (c *console) MultiSelect(ctx context.Context, plugin, message string, options []string, defaults []int) ([]int, error) {
	if err := checkOptions(options); err != nil {
		return nil, err
	}
	sel := make([]int, 0, len(defaults))
	for _, d := range defaults {
		if d < 0 || d >= len(options) {
			return nil, fmt.Errorf("%w: default index %d outside 0..%d", ErrInvalidRequest, d, len(options)-1)
		}
		sel = append(sel, d)
	}
	slices.Sort(sel)
	sel = slices.Compact(sel)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !c.interactive {
		return sel, nil
	}
	// Value before Options: the cursor then starts on the first pre-selected option
	field := huh.NewMultiSelect[int]().Title(questionTitle(plugin, message)).Value(&sel).Options(optionList(options)...)
	if len(options) > visibleOptions {
		field.Height(visibleOptions + 2)
	}
	chosen := func() []int {
		out := make([]int, 0, len(sel))
		for _, i := range sel {
			if i >= 0 && i < len(options) {
				out = append(out, i)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	if err := c.runForm(ctx, field, func() string {
		names := []string{}
		for _, i := range chosen() {
			names = append(names, options[i])
		}
		return echoLine(plugin, message, strings.Join(names, ", "))
	}); err != nil {
		return nil, err
	}
	return chosen(), nil
}

// echoLine is what stays on screen once a question is answered, so the terminal history
// shows every decision (as "? [deploy] Deploy target: production").
func echoLine(plugin, message, answer string) string {
	line := "? " + pluginTag(plugin) + " " + clip.Mark(plainText(message), MaxLineBytes, "…") + " " + clip.Mark(plainText(answer), MaxLineBytes, "…")
	return strings.ReplaceAll(line, "\n", " ") + "\n"
}

// visibleOptions is how many options a long list shows at once (it scrolls).
const visibleOptions = 10

func checkOptions(options []string) error {
	switch {
	case len(options) == 0:
		return fmt.Errorf("%w: no options", ErrInvalidRequest)
	case len(options) > MaxOptions:
		return fmt.Errorf("%w: %d options, at most %d", ErrInvalidRequest, len(options), MaxOptions)
	}
	return nil
}

// questionTitle is what the form shows: who asks, and the sanitised, bounded message.
func questionTitle(plugin, message string) string {
	return pluginTag(plugin) + " " + clipLines(Sanitize(clip.Mark(message, MaxShownLines*MaxLineBytes, "…")), MaxLineBytes, MaxShownLines)
}

// optionList labels each option with its plain, one-line, bounded text; the value is the
// index, so duplicate labels still answer correctly.
func optionList(options []string) []huh.Option[int] {
	opts := make([]huh.Option[int], len(options))
	for i, o := range options {
		opts[i] = huh.NewOption(clip.Mark(oneLine(plainText(clip.Mark(o, 4*MaxLineBytes, "…"))), MaxLineBytes, "…"), i)
	}
	return opts
}
