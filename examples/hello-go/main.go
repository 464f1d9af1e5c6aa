// SPDX-License-Identifier: MIT

// Command hello-go is a fledge-v1 plugin written with the fledge Go SDK. It uses every
// message of the protocol once: output, log (each level), progress (bar, spinner, done),
// prompt (with a default and a validator), confirm, select, multi_select, store, load, exec
// and metadata. Every question has a default, so `fledge --ni hello-go` completes.
//
// An installed plugin dir must hold a runnable program, so the manifest's command is run.sh,
// which execs bin/hello-go; build it before installing:
//
//	go build -o examples/hello-go/bin/hello-go ./examples/hello-go
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/sdk"
)

func main() {
	p, err := sdk.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello-go:", err, "(run me through fledge)")
		os.Exit(1)
	}
	// A session-wide cancel (Ctrl+C, timeout) ends ctx, so every blocking call returns.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-p.Cancelled():
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := run(ctx, p); err != nil {
		_ = p.Log(sdk.LevelError, err.Error())
		os.Exit(1)
	}
}

// h bundles the plugin with the fallbacks a cancelled question takes.
type h struct{ p *sdk.Plugin }

// fallback turns a per-request cancel (non_interactive, timeout, limit_exceeded) into a
// warning and a local default; any other error stops the plugin.
func (x h) fallback(err error, what string, def any) error {
	var ce *sdk.CancelError
	if errors.As(err, &ce) && ce.ID != "" {
		_ = x.p.Log(sdk.LevelWarn, fmt.Sprintf("%s cancelled (%s); using %v", what, ce.Reason, def))
		return nil
	}
	return err
}

// run walks through the protocol once, one step per kind of message.
func run(ctx context.Context, p *sdk.Plugin) error {
	x := h{p}
	introduce(p)
	a, err := ask(ctx, x)
	if err != nil {
		return err
	}
	greet(p, a)
	if err := countRun(ctx, x, a.name); err != nil {
		return err
	}
	if err := runCommands(ctx, p, a.count); err != nil {
		return err
	}
	if err := showMetadata(ctx, p); err != nil {
		return err
	}
	_ = p.Log(sdk.LevelInfo, "done")
	return p.Output("Bye!\n")
}

// introduce shows what init told the plugin, a log line at each level, and some output.
func introduce(p *sdk.Plugin) {
	in := p.Init()
	sb := "unknown"
	if in.Sandbox != nil {
		sb = in.Sandbox.Confinement
	}
	c := in.Capabilities
	_ = p.Log(sdk.LevelDebug, fmt.Sprintf("init received: %d argument(s), protocol %s", len(p.Args()), in.Protocol))
	_ = p.Log(sdk.LevelInfo, fmt.Sprintf("granted: exec=%v store=%v metadata=%v; sandbox: %s", c.Exec, c.Store, c.Metadata, sb))
	_ = p.Log(sdk.LevelWarn, "warnings look like this (nothing is wrong)")
	_ = p.Log(sdk.LevelError, "errors look like this (nothing failed)")
	_ = p.Output(fmt.Sprintf("Hello from %s, a fledge-v1 plugin written in Go with the SDK.\n", in.Plugin.Name))
}

// answers are what the user chose (or the defaults, when fledge runs non-interactively).
type answers struct {
	name  string
	count int
	shout bool
	style string
	langs []string
}

// ask asks each kind of question once: prompt, confirm, select and multi_select. The name's
// default is the one stored by the last run, or the first argument.
func ask(ctx context.Context, x h) (answers, error) {
	p := x.p
	var a answers
	defName := "world"
	if v, ok, err := p.Load(ctx, "last_name"); err != nil {
		if err := x.fallback(err, "load", defName); err != nil {
			return a, err
		}
	} else if ok && v != "" {
		defName = v
	}
	if len(p.Args()) > 0 {
		defName = p.Args()[0]
	}

	var err error
	a.name, err = p.Prompt(ctx, "Who should I greet?", sdk.PromptDefault(defName), sdk.PromptValidate(sdk.ValidateNonEmpty))
	if err != nil {
		a.name = defName
		if err := x.fallback(err, "name prompt", a.name); err != nil {
			return a, err
		}
	}
	countText, err := p.Prompt(ctx, "How many greetings (1-9)?", sdk.PromptDefault("3"), sdk.PromptValidate(sdk.ValidateInteger))
	if err != nil {
		countText = "3"
		if err := x.fallback(err, "count prompt", countText); err != nil {
			return a, err
		}
	}
	a.count, err = strconv.Atoi(countText)
	if err != nil || a.count < 1 || a.count > 9 {
		_ = p.Log(sdk.LevelWarn, fmt.Sprintf("count %q is out of range; using 3", countText))
		a.count = 3
	}
	a.shout, err = p.Confirm(ctx, "Shout it?", sdk.ConfirmDefault(false))
	if err != nil {
		if err := x.fallback(err, "confirm", false); err != nil {
			return a, err
		}
	}
	_, a.style, err = p.Select(ctx, "Greeting style:", []string{"formal", "casual", "pirate"}, sdk.SelectDefault(1))
	if err != nil {
		a.style = "casual"
		if err := x.fallback(err, "select", a.style); err != nil {
			return a, err
		}
	}
	_, a.langs, err = p.MultiSelect(ctx, "Also greet in:", []string{"en", "fr", "de", "es"}, sdk.MultiSelectDefaults(0, 1))
	if err != nil {
		a.langs = []string{"en", "fr"}
		if err := x.fallback(err, "multi_select", a.langs); err != nil {
			return a, err
		}
	}
	return a, nil
}

// greet prints the answers and the greetings, with a progress bar over them.
func greet(p *sdk.Plugin, a answers) {
	_ = p.Output(fmt.Sprintf("Answers: name=%s count=%d shout=%v style=%s also=%s\n", a.name, a.count, a.shout, a.style, strings.Join(a.langs, " ")))

	word := map[string]string{"formal": "Good day", "pirate": "Ahoy"}[a.style]
	if word == "" {
		word = "Hello"
	}
	greeting := fmt.Sprintf("%s, %s!", word, a.name)
	if a.shout {
		greeting = strings.ToUpper(greeting)
	}
	for i := 1; i <= a.count; i++ {
		_ = p.Progress("Greeting", float64(i), float64(a.count))
		_ = p.Output(fmt.Sprintf("  %d. %s\n", i, greeting))
	}
	_ = p.ProgressDone()
	others := map[string]string{"fr": "Bonjour, %s !", "de": "Hallo, %s!", "es": "¡Hola, %s!"}
	for _, l := range a.langs {
		if f, ok := others[l]; ok {
			_ = p.Output(fmt.Sprintf("  (%s) %s\n", l, fmt.Sprintf(f, a.name)))
		}
	}
}

// countRun keeps state between runs: the name for next time's default, and a run count.
func countRun(ctx context.Context, x h, name string) error {
	p := x.p
	runs := 0
	if v, ok, err := p.Load(ctx, "runs"); err == nil && ok {
		runs, _ = strconv.Atoi(v)
	} else if err != nil {
		if err := x.fallback(err, "load", 0); err != nil {
			return err
		}
	}
	runs++
	_ = p.Store("last_name", name)
	_ = p.Store("runs", strconv.Itoa(runs))
	_ = p.Output(fmt.Sprintf("Run #%d of this plugin here (stored in its state.json).\n", runs))
	return nil
}

// runCommands asks fledge to run commands: it runs each in the sandbox, in the project
// root, and returns the result; the last one shows a timeout.
func runCommands(ctx context.Context, p *sdk.Plugin, count int) error {
	res, err := p.Exec(ctx, fmt.Sprintf("seq 1 %d | grep -v 2 | sed 's/^/  line /'", count+2), sdk.ExecTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	_ = p.Output(fmt.Sprintf("exec 'seq | grep | sed' exited %d:\n%s", res.Code, res.Stdout))
	if res.Code != 0 {
		_ = p.Log(sdk.LevelError, "exec failed: "+res.Stderr)
	}
	_ = p.Spinner("Sleeping a second in the sandbox")
	if res, err = p.Exec(ctx, "sleep 1 && echo rested", sdk.ExecTimeout(5*time.Second)); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	_ = p.Output("exec 'sleep 1' said: " + res.Stdout)
	_ = p.ProgressDone()
	if res, err = p.Exec(ctx, "sleep 5", sdk.ExecTimeout(time.Second)); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	_ = p.Output(fmt.Sprintf("exec 'sleep 5' with a 1s timeout: code %d, timed_out=%v\n", res.Code, res.TimedOut))
	return nil
}

// showMetadata asks for project facts fledge collects for us (the env is filtered: no
// secrets) and prints a summary of each.
func showMetadata(ctx context.Context, p *sdk.Plugin) error {
	meta, err := p.Metadata(ctx, "git_status", "git_log", "env", "fledge_config")
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	var changed, commits []string
	var env map[string]string
	_ = json.Unmarshal(meta["git_status"], &changed)
	_ = json.Unmarshal(meta["git_log"], &commits)
	_ = json.Unmarshal(meta["env"], &env)
	latest := "none"
	if len(commits) > 0 {
		latest = commits[0]
	}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	cfg := string(meta["fledge_config"])
	if cfg == "" {
		cfg = "null"
	}
	_ = p.Output(fmt.Sprintf("metadata: %d changed file(s), %d commit(s), latest: %s\n", len(changed), len(commits), latest))
	_ = p.Output(fmt.Sprintf("metadata: env has %d variable(s): %s\n", len(names), strings.Join(names[:min(6, len(names))], " ")))
	_ = p.Output(fmt.Sprintf("metadata: fledge.toml: %.120s\n", cfg))
	return nil
}
