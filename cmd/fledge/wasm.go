package main

import (
	"path/filepath"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/wasmhost"
)

// wasmRuntime makes the runtime of a `runtime = "wasm"` plugin from policy and its grants and
// wires it into the session: the module starts there, its execs and git calls still go
// through the platform sandbox (opts.Sandbox), and plugin_start records the module's sha256,
// preopens and limits. The caller closes the runtime after the session.
func wasmRuntime(e *env, grants policy.Grants, proj *project.Info, dataDir, program string, opts *protocolhost.Options) (*wasmhost.Sandbox, error) {
	wo := wasmhost.Options{
		Grants:      toWire(grants),
		DataDir:     dataDir,
		MemoryBytes: e.cfg.Wasm.Memory,
		Timeout:     e.cfg.Wasm.Timeout,
		MessageMax:  int(e.cfg.Limits.LineMax),
	}
	if proj != nil {
		wo.ProjectRoot = proj.Root
	}
	if e.stateDir != "" {
		// Compiled modules, keyed by content (wazero): never shared with a changed module.
		wo.CacheDir = filepath.Join(e.stateDir, "wasm-cache")
	}
	w, err := wasmhost.New(wo)
	if err != nil {
		// A cache that cannot be used costs compile time, not safety.
		wo.CacheDir = ""
		if w, err = wasmhost.New(wo); err != nil {
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
	return w, nil
}
