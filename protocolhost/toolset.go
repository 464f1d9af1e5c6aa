// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/jsonrpc"
	"github.com/fledgehq/fledge/protocolhost/mcp"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/ui"

	// Every adapter that offers tools registers its tools.Provider when imported.
	_ "github.com/fledgehq/fledge/protocolhost/fledgev1"
	_ "github.com/fledgehq/fledge/protocolhost/invokev1"
	_ "github.com/fledgehq/fledge/protocolhost/runtimev1"
)

// ToolSet is what `tools`, `hooks` and `serve` share: the installed plugins, the project,
// and one catalogue whose providers keep their plugins up for this invocation.
type ToolSet struct {
	h         *Host
	reg       *plugin.Registry
	proj      *project.Info
	Catalogue *tools.Catalogue
	flush     func()
	// rebound are the catalogues made for an MCP client's root (closed with the set).
	rebound []*tools.Catalogue
}

// OpenTools makes the catalogue of every installed plugin's tools (no plugin starts yet).
func (h *Host) OpenTools() (*ToolSet, error) {
	reg, err := h.registry()
	if err != nil {
		return nil, err
	}
	proj, err := h.project()
	if err != nil {
		return nil, err
	}
	// Plugins' stderr (and warnings quoting them) reach a terminal only sanitised.
	stderr, flush := pluginStream(h.stderr())
	cat := tools.NewCatalogue(&tools.Host{Env: h.Env, Project: proj, Stderr: stderr}, reg)
	return &ToolSet{h: h, reg: reg, proj: proj, Catalogue: cat, flush: flush}, nil
}

// Close shuts every plugin down (shutdown, SIGTERM, SIGKILL).
func (t *ToolSet) Close() {
	_ = t.Catalogue.Close()
	for _, c := range t.rebound {
		_ = c.Close()
	}
	t.flush()
}

// rebind is the catalogue of the project an MCP client names as its root: the root is the
// project as --project would be (the home directory and / never are).
func (t *ToolSet) rebind(root string) (*tools.Catalogue, error) {
	proj, err := project.Detect(root, root)
	if err != nil {
		return nil, err
	}
	stderr, flush := pluginStream(t.h.stderr())
	prev := t.flush
	t.flush = func() { prev(); flush() }
	c := tools.NewCatalogue(&tools.Host{Env: t.h.Env, Project: proj, Stderr: stderr}, t.reg)
	c.Hooks = toolHooks{t, c}
	t.rebound = append(t.rebound, c)
	return c, nil
}

// noRootsWarning is what serve --mcp says when the client offers no root while fledge was
// started from / or the home directory without --project: plugins then get no project,
// rather than a guess.
func (t *ToolSet) noRootsWarning() string {
	if t.h.opts.ProjectFlag != "" {
		return ""
	}
	cwd, err := os.Getwd()
	if err != nil {
		return ""
	}
	home, _ := os.UserHomeDir()
	if cwd != "/" && (home == "" || filepath.Clean(cwd) != filepath.Clean(home)) {
		return ""
	}
	return fmt.Sprintf("serve --mcp: started in %s with no --project, and the MCP client offers no roots: plugins get no project (pass --project DIR in the client's server config)", cwd)
}

// CallTimeout applies policy's exec timeout rule (policy.ExecTimeout, the one rule for every
// bound a caller asks for) to a requested --timeout: the bound in force, and whether the
// request was over the policy's maximum.
func (t *ToolSet) CallTimeout(requested time.Duration) (time.Duration, bool, error) {
	secs := requested.Seconds()
	cfg := t.h.Env.Config
	return policy.ExecTimeout(&secs, cfg.Sandbox.TimeoutDefault, cfg.Sandbox.TimeoutMax)
}

// Call calls one tool with args; timeout (from CallTimeout), when above zero, bounds it
// instead of the plugin's own.
func (t *ToolSet) Call(ctx context.Context, name string, args map[string]any, timeout time.Duration) (*tools.Tool, *tools.Result, error) {
	if timeout > 0 {
		ctx = tools.WithCallTimeout(ctx, timeout)
	}
	t.Catalogue.Hooks = toolHooks{t, t.Catalogue}
	return t.Catalogue.Call(ctx, name, args)
}

// jsonrpc returns the jsonrpc-2.0 provider and the installed jsonrpc-2.0 plugins, bound, in
// name order; plugins that cannot be bound are reported and left out.
func (t *ToolSet) jsonrpc() (*jsonrpc.Provider, []*core.Binding) { return t.jsonrpcIn(t.Catalogue) }

// jsonrpcIn is jsonrpc for one of the set's catalogues (the one an MCP client's root chose).
func (t *ToolSet) jsonrpcIn(cat *tools.Catalogue) (*jsonrpc.Provider, []*core.Binding) {
	warn := t.h.stderr()
	p, _ := cat.Provider(plugin.ProtocolJSONRPC).(*jsonrpc.Provider)
	var names []string
	for _, en := range t.reg.Plugins {
		if en.Protocol == plugin.ProtocolJSONRPC {
			names = append(names, en.Name)
		}
	}
	sort.Strings(names)
	var out []*core.Binding
	for i, n := range names {
		if i >= jsonrpc.MaxPlugins {
			fmt.Fprintf(warn, "fledge: warning: plugin %s not loaded: at most %d jsonrpc-2.0 plugins run (the protocol's limit)\n", n, jsonrpc.MaxPlugins)
			continue
		}
		b, err := cat.Binding(n)
		if err != nil {
			_ = ui.HostLine(warn, fmt.Sprintf("fledge: warning: plugin %s not loaded: %v", n, err))
			continue
		}
		out = append(out, b)
	}
	return p, out
}

// RunHook runs hook/<hook> through every installed jsonrpc-2.0 plugin subscribed to it, in
// priority order (jsonrpc.Provider.RunHook).
func (t *ToolSet) RunHook(ctx context.Context, hook string, data map[string]any) (*jsonrpc.HookResult, error) {
	p, bindings := t.jsonrpc()
	if p == nil {
		return nil, exitErr(ExitCannotRun, "the jsonrpc-2.0 adapter is not built in")
	}
	return p.RunHook(ctx, bindings, hook, data), nil
}

// DefaultPriority is the priority `serve --protocol jsonrpc-2.0` announces without --priority
// or [serve] priority.
const DefaultPriority = jsonrpc.DefaultPriority

// ServePriority is [serve] priority from config.toml.
func (t *ToolSet) ServePriority() int { return t.h.Env.Config.Serve.Priority }

// ServeJSONRPC is fledge as one jsonrpc-2.0 plugin of another host on in/out, with every
// installed plugin's tools and hooks behind it.
func (t *ToolSet) ServeJSONRPC(ctx context.Context, in io.Reader, out io.Writer, priority int) error {
	p, bindings := t.jsonrpc()
	if p == nil {
		return exitErr(ExitCannotRun, "the jsonrpc-2.0 adapter is not built in")
	}
	err := jsonrpc.Serve(ctx, jsonrpc.ServeOptions{
		In: in, Out: out, Catalogue: t.Catalogue, Provider: p, Bindings: bindings,
		Version: core.FledgeVersion(), Priority: priority, LineMax: int(t.h.Env.Config.Limits.LineMax),
		Warn: warnFunc(t.h.stderr()),
	})
	if err != nil && ctx.Err() != nil {
		return &ExitError{Code: ExitInterrupted}
	}
	if err != nil {
		return exitErr(ExitFailure, "serve: %v", err)
	}
	return nil
}

// ServeMCP serves the catalogue as one MCP server on in/out; only, when not empty, limits it
// to those tools. out carries the protocol only: plugins' stderr and fledge's warnings go
// to stderr.
func (t *ToolSet) ServeMCP(ctx context.Context, in io.ReadCloser, out io.WriteCloser, only []string) error {
	t.Catalogue.Hooks = toolHooks{t, t.Catalogue}
	err := mcp.Serve(ctx, t.Catalogue, in, out, mcp.ServeOptions{
		Only:    only,
		LineMax: int(t.h.Env.Config.Limits.LineMax),
		Warn:    warnFunc(t.h.stderr()),
		Rebind:  t.rebind,
		NoRoots: t.noRootsWarning(),
	})
	switch {
	case errors.Is(err, mcp.ErrNoSuchTool):
		return exitErr(ExitUsage, "serve --mcp: %v", err)
	case err != nil && ctx.Err() != nil:
		return &ExitError{Code: ExitInterrupted}
	case err != nil:
		return exitErr(ExitCannotRun, "serve --mcp: %v", err)
	case ctx.Err() != nil:
		return &ExitError{Code: ExitInterrupted} // ended by a signal, as serve --protocol jsonrpc-2.0
	}
	return nil
}
