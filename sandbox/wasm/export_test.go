// SPDX-License-Identifier: MIT

package wasm

// Hooks for the tests and benchmarks of this directory (package wasm_test).

import (
	"bytes"
	"context"

	"github.com/fledgehq/fledge/third_party/wazero"
)

// StartSectionBound bounds a module's start section (wasm.go).
const StartSectionBound = startSectionBound

// MergeData is what is compiled for a module's bytes (datamerge.go).
var MergeData = mergeData

// MergeVersion names what MergeData does.
const MergeVersion = mergeVersion

// InitialMemory instantiates bin in a shared runtime, runs nothing of it, and returns a copy
// of the memory the instance starts with.
func InitialMemory(bin []byte) ([]byte, error) {
	e, err := acquireEngine(engineKey{})
	if err != nil {
		return nil, err
	}
	defer e.release()
	ctx := context.Background()
	cm, err := e.rt.CompileModule(ctx, bin)
	if err != nil {
		return nil, err
	}
	defer cm.Close(ctx)
	mod, err := e.rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, err
	}
	defer mod.Close(ctx)
	b, _ := mod.Memory().Read(0, mod.Memory().Size())
	return bytes.Clone(b), nil
}

// CompileCount is how many times this process compiled a module (wazero CompileModule
// calls, cache-dir hits included: each one decodes and validates the module).
func CompileCount() int64 { return compiles.Load() }

// MergeCount is how many times this process merged a module's data segments (datamerge.go).
func MergeCount() int64 { return merges.Load() }

// HashCount is how many times this process hashed a module it read whole (keptcopy.go).
func HashCount() int64 { return hashes.Load() }

// ForgetCompiled drops every shared runtime and compiled module, as if the process had just
// started: the benchmarks of a new fledge process (first compile, cached compile) use it.
// Runs in progress keep theirs until they end.
func ForgetCompiled() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, e := range registry.engines {
		retireLocked(e)
	}
}

// CachedModules is the number of compiled modules kept in memory and their estimated bytes.
func CachedModules() (n int, bytes int64) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.lru.Len(), registry.bytes
}

// SetCompiledBounds changes the cache's bounds for a test; restore puts them back.
func SetCompiledBounds(modules int, bytes int64) (restore func()) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	m, b := registry.maxModules, registry.maxBytes
	registry.maxModules, registry.maxBytes = modules, bytes
	return func() {
		registry.mu.Lock()
		defer registry.mu.Unlock()
		registry.maxModules, registry.maxBytes = m, b
	}
}

// SetCacheMaxBytes lowers the compilation cache dir's bound (cacheprune.go) for a test.
func SetCacheMaxBytes(n int64) (restore func()) {
	old := cacheMaxBytes
	cacheMaxBytes = n
	return func() { cacheMaxBytes = old }
}
