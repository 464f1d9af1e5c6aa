// SPDX-License-Identifier: MIT

package wasm

// Compiled modules are kept in memory for the life of the process, so a host that starts the
// same WASM plugin more than once (`fledge serve`, a tools session, a test binary) compiles
// it once: wazero re-decodes and re-validates a module on every CompileModule, even when
// its compilation cache holds the machine code, and for a Go-built module that costs far
// more than running it (docs/performance.md, "WASM starts").
//
// A compiled module belongs to the wazero runtime that compiled it (its function type ids
// are the runtime's), so each start is an instance in a runtime shared by every plugin with
// the same compile settings (an engine), not a runtime of its own. What stays per start is
// everything that confines the module: its memory (and memory limit), its stdio, its
// preopens, its clocks and its run context (deadline, stop); the host functions find the
// run they serve through the call's context, and check its grants on every call.
//
// The cache is keyed by the sha256 of the bytes fledge read and verified, never by path or
// mtime, and bounded by count and by bytes. An entry keeps its verified bytes, so a later
// read equal to them byte for byte is known to have that sha256 without hashing it again.

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fledgehq/fledge/third_party/wazero"
	"github.com/fledgehq/fledge/third_party/wazero/api"
	"github.com/fledgehq/fledge/third_party/wazero/experimental"
	"github.com/fledgehq/fledge/third_party/wazero/imports/wasi_snapshot_preview1"
)

// Bounds of the in-memory cache of compiled modules.
const (
	// MaxCompiledModules bounds the compiled modules kept in memory per process.
	MaxCompiledModules = 8
	// MaxCompiledBytes bounds their estimated size: the module's bytes (kept to verify the
	// next read) plus compiledFactor times that for its machine code.
	MaxCompiledBytes = 512 << 20
	// compiledFactor: wazero's machine code for a module is about four times its wasm bytes
	// (benchguest: 3.8 MB of wasm, 15.3 MB in the compilation cache).
	compiledFactor = 4
	// maxEngines bounds the shared runtimes (one per compile setting and cache dir; a
	// process normally has one).
	maxEngines = 4
)

// engineKey is everything that decides how a module is compiled and where compiled code is
// kept on disk: the runtime config is made from it alone (engineKey.config), so no setting
// can change compilation without being part of the cache key.
type engineKey struct {
	interpreter bool
	cacheDir    string
}

// config is the wazero runtime config of an engine. Settings that are the same for every
// engine are here too, as constants, for the same reason.
func (k engineKey) config(cache wazero.CompilationCache) wazero.RuntimeConfig {
	cfg := wazero.NewRuntimeConfig()
	if k.interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter()
	}
	// CloseOnContextDone: a module in a tight loop is stopped when its run context ends
	// (the wall-clock bound, Kill, the caller's cancel); it also makes the compiler insert
	// the checks that do so.
	// No DWARF: only the first line of a trap is kept, and parsing it costs every compile.
	return cfg.WithCloseOnContextDone(true).WithCompilationCache(cache).WithDebugInfoEnabled(false)
}

// engine is one shared wazero runtime with WASI and fledge's host module instantiated once.
type engine struct {
	key   engineKey
	rt    wazero.Runtime
	cache wazero.CompilationCache
	used  uint64 // registry clock of the last acquire (the least recent is retired first)

	refs    int  // Sandboxes and runs holding it (under registry.mu)
	retired bool // out of the registry: closed when refs reaches 0
}

// compiled is one cached compiled module.
type compiled struct {
	eng    *engine
	digest string
	data   []byte // the verified bytes; never modified
	cm     wazero.CompiledModule
	cost   int64
	elem   *list.Element // in registry.lru; nil once evicted
	unmap  func()        // unmaps the merged bytes mapped from the cache dir (nil if none)

	users int // runs instantiating or running it (under registry.mu)
}

type modKey struct {
	eng    *engine
	digest string
}

// flight is a compilation in progress: others wanting the same module wait for it rather
// than compile it too (Describe starts one that Start then finds).
type flight struct {
	done chan struct{}
	err  error // set before done is closed
}

// registry is the process's engines and compiled modules.
var registry = struct {
	mu      sync.Mutex
	clock   uint64
	engines map[engineKey]*engine
	modules map[modKey]*compiled
	flights map[modKey]*flight
	lru     *list.List // *compiled, most recently used first
	bytes   int64

	maxModules int
	maxBytes   int64
}{
	engines: map[engineKey]*engine{}, modules: map[modKey]*compiled{}, flights: map[modKey]*flight{}, lru: list.New(),
	maxModules: MaxCompiledModules, maxBytes: MaxCompiledBytes,
}

// compiles counts real compilations (wazero CompileModule calls), for tests.
var compiles atomic.Int64

// acquireEngine returns the shared engine for key, made on first use (a cache dir that
// cannot be used is an error), with a reference the caller releases.
func acquireEngine(key engineKey) (*engine, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.clock++
	if e := registry.engines[key]; e != nil {
		e.refs++
		e.used = registry.clock
		return e, nil
	}
	var cache wazero.CompilationCache
	if key.cacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(key.cacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm compilation cache: %w", err)
		}
		cache = c
	} else {
		cache = wazero.NewCompilationCache()
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, key.config(cache))
	e := &engine{key: key, rt: rt, cache: cache, refs: 1, used: registry.clock}
	if err := e.instantiateHost(ctx); err != nil {
		_ = rt.Close(ctx)
		_ = cache.Close(ctx)
		return nil, err
	}
	if len(registry.engines) >= maxEngines {
		var oldest *engine
		for _, o := range registry.engines {
			if oldest == nil || o.used < oldest.used {
				oldest = o
			}
		}
		retireLocked(oldest)
	}
	registry.engines[key] = e
	return e, nil
}

// retireLocked takes e out of the registry and drops its cached modules; it is closed when
// its last user releases it (a running module keeps its runtime).
func retireLocked(e *engine) {
	if registry.engines[e.key] == e {
		delete(registry.engines, e.key)
	}
	e.retired = true
	for el := registry.lru.Front(); el != nil; {
		next := el.Next()
		if c := el.Value.(*compiled); c.eng == e {
			evictLocked(c)
		}
		el = next
	}
	e.closeIfUnusedLocked()
}

func (e *engine) closeIfUnusedLocked() {
	if e.retired && e.refs == 0 {
		ctx := context.Background()
		_ = e.rt.Close(ctx)
		_ = e.cache.Close(ctx)
	}
}

// hold adds a reference for a run; the caller has one already (its Sandbox's), so e is open.
func (e *engine) hold() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	e.refs++
}

func (e *engine) release() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	e.refs--
	e.closeIfUnusedLocked()
}

// evictLocked drops c from the cache; its code is freed when its last run ends.
func evictLocked(c *compiled) {
	if c.elem == nil {
		return
	}
	registry.lru.Remove(c.elem)
	c.elem = nil
	delete(registry.modules, modKey{c.eng, c.digest})
	registry.bytes -= c.cost
	c.closeIfUnusedLocked()
}

func (c *compiled) closeIfUnusedLocked() {
	if c.elem == nil && c.users == 0 {
		_ = c.cm.Close(context.Background())
		if c.unmap != nil {
			c.unmap() // the module kept slices of them: only now unused
			c.unmap = nil
		}
	}
}

// release ends one run's use of c.
func (c *compiled) release() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	c.users--
	c.closeIfUnusedLocked()
}

// knownModules are the cached modules' verified bytes and digests (readVerified compares a
// file with them before hashing it).
func knownModules() []pin {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := make([]pin, 0, registry.lru.Len())
	for el := registry.lru.Front(); el != nil; el = el.Next() {
		c := el.Value.(*compiled)
		out = append(out, pin{digest: c.digest, data: c.data})
	}
	return out
}

// module returns the compiled module for data (whose sha256 is digest, as the caller
// verified), compiling it on a miss, with a use the caller releases. A module larger than
// the byte bound on its own is compiled for this run and not kept. merged is
// mergeData(data) when the caller has it already, else nil.
func (e *engine) module(ctx context.Context, digest string, data, merged []byte) (*compiled, error) {
	c, f, own := e.lookup(digest)
	switch {
	case c != nil:
		return c, nil
	case own:
		return e.fly(ctx, f, digest, data, merged)
	}
	// Someone compiles it: wait, then take it from the cache (or, if it was not kept, compile
	// it here).
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the module's compile: %w", ctx.Err())
	}
	if f.err != nil {
		return nil, f.err
	}
	k := modKey{e, digest}
	registry.mu.Lock()
	if c := registry.modules[k]; c != nil {
		c.users++
		registry.lru.MoveToFront(c.elem)
		registry.mu.Unlock()
		return c, nil
	}
	registry.mu.Unlock()
	return e.compile(ctx, k, data, merged)
}

// lookup returns the cached module for digest with a use, or the flight compiling it: a
// new one (own) that the caller must complete with fly, or another's to wait for.
func (e *engine) lookup(digest string) (c *compiled, f *flight, own bool) {
	k := modKey{e, digest}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if c := registry.modules[k]; c != nil {
		c.users++
		registry.lru.MoveToFront(c.elem)
		return c, nil, false
	}
	if f := registry.flights[k]; f != nil {
		return nil, f, false
	}
	f = &flight{done: make(chan struct{})}
	registry.flights[k] = f
	return nil, f, true
}

// fly compiles the module of the flight f the caller owns (lookup) and ends the flight.
func (e *engine) fly(ctx context.Context, f *flight, digest string, data, merged []byte) (*compiled, error) {
	k := modKey{e, digest}
	c, err := e.compile(ctx, k, data, merged)
	registry.mu.Lock()
	delete(registry.flights, k)
	f.err = err
	close(f.done)
	registry.mu.Unlock()
	return c, err
}

// compile compiles data for k and caches it (see module). merged is mergeData(data) when
// the caller made it; else it is mapped from the cache dir's entry (mergecache.go) or made
// here, and then written there for the next process.
func (e *engine) compile(ctx context.Context, k modKey, data, merged []byte) (*compiled, error) {
	digest := k.digest
	// Compiled without the lock; flights make two starts of one module wait for one
	// compile, and if two compile anyway (the module was not kept) one entry is kept.
	compiles.Add(1)
	began := time.Now()
	key, err := compileKey(digest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrModule, err)
	}
	var unmap func()
	if merged == nil {
		var ok bool
		if merged, unmap, ok = loadMerged(e.key.cacheDir, key); !ok {
			merged = mergeData(data)
		}
	}
	if unmap == nil && len(merged) > 0 && &merged[0] != &data[0] {
		storeMerged(e.key.cacheDir, key, merged)
	}
	// The compiled module keeps slices of merged (its function bodies and data segments)
	// instead of copies: merged is never modified (a new buffer, a read-only mapping, or data
	// itself).
	cctx := experimental.WithBinaryRetained(experimental.WithCompilationKey(ctx, key))
	cm, err := e.rt.CompileModule(cctx, merged)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, fmt.Errorf("%w: %v", ErrModule, err)
	}
	// A compile that wrote to the cache dir (wazero's code, the merged bytes) may have taken
	// it past its bound (cacheprune.go); one that found everything there costs a few stats.
	maybePruneCache(e.key.cacheDir, began, time.Now())
	c := &compiled{eng: e, digest: digest, data: data, cm: cm, cost: int64(len(data)) * (1 + compiledFactor), users: 1, unmap: unmap}

	registry.mu.Lock()
	defer registry.mu.Unlock()
	if have := registry.modules[k]; have != nil {
		_ = cm.Close(ctx)
		if unmap != nil {
			unmap()
		}
		have.users++
		registry.lru.MoveToFront(have.elem)
		return have, nil
	}
	if e.retired || c.cost > registry.maxBytes {
		return c, nil // not cached: closed when this run ends (elem is nil)
	}
	for registry.lru.Len() > 0 && (registry.lru.Len() >= registry.maxModules || registry.bytes+c.cost > registry.maxBytes) {
		evictLocked(registry.lru.Back().Value.(*compiled))
	}
	c.elem = registry.lru.PushFront(c)
	registry.modules[k] = c
	registry.bytes += c.cost
	return c, nil
}

// compileKey is what wazero identifies the module fledge compiles (mergeData(data)) by, in
// memory and in the compilation cache, instead of hashing the merged bytes again (3 ms for a
// Go-built module): the sha256 fledge verified of data, and the version of mergeData. The
// same key is never given for different bytes, as wazero requires: the merged bytes are a
// function of the two.
func compileKey(digest string) ([32]byte, error) {
	sum, err := hex.DecodeString(digest)
	if err != nil || len(sum) != sha256.Size {
		return [32]byte{}, fmt.Errorf("not a sha256: %q", digest)
	}
	h := sha256.New()
	h.Write([]byte(mergeVersion))
	h.Write([]byte{0})
	h.Write(sum)
	var key [32]byte
	h.Sum(key[:0])
	return key, nil
}

// guestKey carries the run a host function serves in the context of the module's _start.
type guestKey struct{}

var errNoRun = errors.New("fledge host function called outside a plugin run")

// guestOf is the run a host function was called for; a call with none traps.
func guestOf(ctx context.Context) *guest {
	g, ok := ctx.Value(guestKey{}).(*guest)
	if !ok || g == nil {
		panic(errNoRun)
	}
	return g
}

// instantiateHost instantiates WASI and the "fledge" host module once in the engine. The
// host module has every fledge function: which ones a plugin may import is decided per
// start (checkImports refuses an ungranted import before anything runs), and each
// capability-gated function checks the calling run's grants again on every call.
func (e *engine) instantiateHost(ctx context.Context) error {
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, e.rt); err != nil {
		return fmt.Errorf("wasi: %w", err)
	}
	i32 := api.ValueTypeI32
	b := e.rt.NewHostModuleBuilder("fledge")
	fn := func(name string, params, results []api.ValueType, call func(ctx context.Context, g *guest, m api.Module, st []uint64)) {
		capName := hostImports[name]
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, st []uint64) {
			g := guestOf(ctx)
			if capName != "" && !granted(g.p.opts.Grants, capName) {
				panic(&CapabilityError{Import: "fledge." + name, Capability: capName})
			}
			call(ctx, g, m, st)
		}), params, results).Export(name)
	}
	pp, ppr, one := []api.ValueType{i32, i32}, []api.ValueType{i32}, []api.ValueType{i32}
	fn("send", pp, nil, func(ctx context.Context, g *guest, m api.Module, st []uint64) {
		g.send(ctx, m, api.DecodeU32(st[0]), api.DecodeU32(st[1]))
	})
	fn("recv", pp, ppr, func(ctx context.Context, g *guest, m api.Module, st []uint64) {
		st[0] = api.EncodeU32(g.recv(ctx, m, api.DecodeU32(st[0]), api.DecodeU32(st[1])))
	})
	fn("exit", one, nil, func(ctx context.Context, g *guest, m api.Module, st []uint64) {
		g.exit(ctx, m, api.DecodeU32(st[0]))
	})
	ret := func(name string, f func(*guest) func(context.Context, api.Module, uint32, uint32) uint32) {
		fn(name, pp, ppr, func(ctx context.Context, g *guest, m api.Module, st []uint64) {
			st[0] = api.EncodeU32(f(g)(ctx, m, api.DecodeU32(st[0]), api.DecodeU32(st[1])))
		})
	}
	ret("exec", func(g *guest) func(context.Context, api.Module, uint32, uint32) uint32 { return g.exec })
	fn("store_set", pp, nil, func(ctx context.Context, g *guest, m api.Module, st []uint64) {
		g.storeSet(ctx, m, api.DecodeU32(st[0]), api.DecodeU32(st[1]))
	})
	ret("store_get", func(g *guest) func(context.Context, api.Module, uint32, uint32) uint32 { return g.storeGet })
	ret("metadata", func(g *guest) func(context.Context, api.Module, uint32, uint32) uint32 { return g.metadata })
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("fledge host functions: %w", err)
	}
	return nil
}
