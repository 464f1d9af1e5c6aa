// SPDX-License-Identifier: MIT

package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/fledgehq/fledge/sdk"
)

// A plugin's main. (Compiled, not run: it needs fledge on the other end of stdin/stdout.)
func Example() {
	p, err := sdk.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "not running under fledge:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	_ = p.Spinner("Resolving targets")
	last, _, _ := p.Load(ctx, "last_target")
	if last == "" {
		last = "staging"
	}
	target, err := p.Prompt(ctx, "Deploy target:", sdk.PromptDefault(last))
	if errors.Is(err, sdk.ErrCancelled) { // Ctrl+C, a timeout, or --ni without a default
		os.Exit(130)
	}
	_ = p.ProgressDone()
	res, err := p.Exec(ctx, "git describe --tags", sdk.ExecCwd("."))
	if err != nil || res.Code != 0 {
		_ = p.Log(sdk.LevelWarn, "no tag to deploy")
	}
	_ = p.Store("last_target", target)
	_ = p.Output(fmt.Sprintf("Deployed to %s\n", target))
}
