// SPDX-License-Identifier: MIT

//go:build wasip1

// Command hello-wasm is a fledge-v1 plugin compiled to WebAssembly with the fledge Go SDK:
// the same SDK calls as a native plugin, over fledge's host functions instead of stdio.
// fledge runs it in its WASM runtime: no environment, no sockets, no processes, only the
// directories its filesystem grant preopens (/project read-only, /plugin read-write).
//
//	GOOS=wasip1 GOARCH=wasm go build -o examples/hello-wasm/bin/hello-wasm.wasm ./examples/hello-wasm
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/fledgehq/fledge/sdk"
)

func main() {
	p, err := sdk.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello-wasm:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	name := "world"
	if args := p.Args(); len(args) > 0 {
		// `fledge hello-wasm Ada` on the command line, --name=Ada as a tool call.
		name = strings.TrimPrefix(args[0], "--name=")
	}
	runs := 0
	if v, ok, err := p.Load(ctx, "runs"); err == nil && ok {
		runs, _ = strconv.Atoi(v)
	}
	runs++
	_ = p.Store("runs", strconv.Itoa(runs))

	// exec goes through fledge's exec path: pathguard, the platform sandbox, the audit log.
	res, err := p.Exec(ctx, "echo exec-ok; pwd")
	execLine := "exec failed: "
	if err == nil {
		execLine = fmt.Sprintf("exec: code %d, %s", res.Code, strings.Join(strings.Fields(res.Stdout), " "))
	} else {
		execLine += err.Error()
	}

	// The project is preopened read-only at /project.
	readme := "fledge.toml: "
	if b, err := os.ReadFile("/project/fledge.toml"); err == nil {
		readme += fmt.Sprintf("%d bytes", len(b))
	} else {
		readme += err.Error()
	}
	_ = os.WriteFile("/plugin/last-greeted", []byte(name), 0o644)

	_ = p.Output(fmt.Sprintf("Hello, %s, from WebAssembly! Run #%d.\n", name, runs))
	fmt.Println(execLine)
	fmt.Println(readme)
	fmt.Printf("environment: %d variables\n", len(os.Environ()))
}
