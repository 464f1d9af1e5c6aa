// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/sandbox/wasm"
	"github.com/fledgehq/fledge/ui"
)

// WasmRuntime makes the runtime of a `runtime = "wasm"` plugin from policy and its grants and
// wires it into the session: the module starts there, its execs and git calls still go
// through the platform sandbox (opts.Sandbox), and plugin_start records the module's sha256,
// preopens and limits. The caller closes the runtime after the session. Every way a
// fledge-v1 command runs (`fledge <command>`, a tool call) wires WASM through here.
func WasmRuntime(e *core.Env, b *core.Binding, program string, opts *Options) (*wasm.Sandbox, error) {
	wo := wasm.Options{
		Grants:      Capabilities(b.Entry.Granted),
		DataDir:     b.DataDir,
		MemoryBytes: e.Config.Wasm.Memory,
		Timeout:     e.Config.Wasm.Timeout,
		MessageMax:  int(e.Config.Limits.LineMax),
	}
	if b.Project != nil {
		wo.ProjectRoot = b.Project.Root
	}
	// Compiled modules, keyed by content (wazero): never shared with a changed module.
	wo.CacheDir = wasmCacheDir(e)
	w, err := wasm.New(wo)
	if err != nil {
		// A cache that cannot be used costs compile time, not safety.
		wo.CacheDir = ""
		if w, err = wasm.New(wo); err != nil {
			return nil, err
		}
	}
	details, err := w.Describe(program)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	opts.PluginSandbox = w
	opts.PluginStartDetails = details
	// Ctrl+C and SIGTERM: a module sees the session's cancel only when it next calls recv
	// (not in a loop, not in a blocked host call), it has no processes to clean up, and its
	// execs end with the session's cancel. It is closed after wasm.CancelGrace, not the
	// native plugin's 5 s.
	if l := &opts.Limits; l.CancelGrace <= 0 || l.CancelGrace > wasm.CancelGrace {
		l.CancelGrace = wasm.CancelGrace
	}
	if l := &opts.Limits; l.KillAfter <= 0 || l.KillAfter > 2*wasm.CancelGrace {
		l.KillAfter = 2 * wasm.CancelGrace
	}
	// What init tells the plugin: a module has no sockets, whatever the network grant.
	opts.PluginSpec.Network, opts.PluginSpec.UnixSockets = false, false
	return w, nil
}

// wasmCacheDir is where compiled modules are kept ("" when there is no state dir).
func wasmCacheDir(e *core.Env) string {
	if e.StateDir == "" {
		return ""
	}
	return filepath.Join(e.StateDir, "wasm-cache")
}

// PrecompileWasm compiles an installed WASM plugin's modules into the cache, as the Rust
// fledge host does at install, so its first run does not pay the compile. A failure only
// costs that.
func PrecompileWasm(ctx context.Context, e *core.Env, name string, out io.Writer) {
	dir := plugin.Dir(e.ConfigDir, name)
	man, _, err := plugin.LoadManifest(dir)
	if err != nil || !man.IsWasm() || wasmCacheDir(e) == "" {
		return
	}
	w, err := wasm.New(wasm.Options{CacheDir: wasmCacheDir(e)})
	if err != nil {
		fmt.Fprintf(out, "warning: wasm compilation cache: %v\n", err)
		return
	}
	defer w.Close()
	done := map[string]bool{}
	for _, c := range man.Commands {
		if done[c.Binary] {
			continue
		}
		done[c.Binary] = true
		program, err := core.BinaryPath(dir, c.Binary, false)
		if err == nil {
			_ = ui.HostLine(out, fmt.Sprintf("compiling %s (WebAssembly)...", c.Binary))
			err = w.Precompile(ctx, program)
		}
		if err != nil {
			_ = ui.HostLine(out, fmt.Sprintf("warning: %s: %v (it is compiled when it first runs)", c.Binary, err))
		}
	}
}

// WasmInfo is what doctor and plugins info say about WASM plugins: confined by the runtime
// itself, the same on every OS, with the policy's bounds (and, for one plugin, its preopens).
func WasmInfo(e *core.Env, grants *policy.Grants, dataDir string) map[string]any {
	wo := wasm.Options{MemoryBytes: e.Config.Wasm.Memory, Timeout: e.Config.Wasm.Timeout}
	info := map[string]any{
		"confinement":  wasm.Confinement,
		"note":         "confined by the WASM runtime on every OS: no environment, no sockets, no processes, only the preopened directories",
		"memory_bytes": e.Config.Wasm.Memory,
		"timeout_ms":   e.Config.Wasm.Timeout.Milliseconds(),
	}
	if grants != nil {
		wo.Grants = Capabilities(*grants)
		wo.ProjectRoot = "<project>"
		wo.DataDir = dataDir
		pre := wo.Preopens()
		if pre == nil {
			pre = []wasm.Preopen{}
		}
		info["preopens"] = pre
	}
	return info
}

// WasmInfoText is WasmInfo on one line.
func WasmInfoText(info map[string]any) string {
	s := "confined by the runtime on every OS (no env, sockets or processes)"
	if pre, ok := info["preopens"].([]wasm.Preopen); ok {
		if len(pre) == 0 {
			s += "; no directories"
		}
		for _, p := range pre {
			mode := "rw"
			if p.ReadOnly {
				mode = "ro"
			}
			s += fmt.Sprintf("; %s = %s (%s)", p.Guest, p.Host, mode)
		}
	}
	return s + fmt.Sprintf("; memory %d MiB, time %v", info["memory_bytes"].(int64)>>20, time.Duration(info["timeout_ms"].(int64))*time.Millisecond)
}
