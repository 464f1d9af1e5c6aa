package wasm

// Hooks for the tests and benchmarks of this directory (package wasm_test).

// CompileCount is how many times this process compiled a module (wazero CompileModule
// calls, cache-dir hits included: each one decodes and validates the module).
func CompileCount() int64 { return compiles.Load() }

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
