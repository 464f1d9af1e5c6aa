// SPDX-License-Identifier: MIT

package wasm_test

// Tests of the in-memory cache of compiled modules (compiled.go): a host that starts the same
// module again does not compile it again, a module whose bytes changed is never served from
// memory, each start is its own instance, and the cache stays within its bounds.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost/fledgev1"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/wasm"
)

func exitModule(code uint32) []byte {
	return assemble([]wimport{{"fledge", "exit", tI}}, 1, callExit(0, code))
}

// TestSecondStartDoesNotCompile: each start makes a new Sandbox, as each tool call through
// `fledge serve` does (fledgev1.WasmRuntime); only the first compiles. The key is the
// content, so the same bytes at another path are not compiled again either; a different
// engine setting (the interpreter) is a different compile.
func TestSecondStartDoesNotCompile(t *testing.T) {
	wasm.ForgetCompiled()
	dir := t.TempDir()
	path := writeModule(t, dir, "m.wasm", exitModule(7))
	run := func(opts wasm.Options, p string) int {
		proc, err := startModule(t, opts, p, nil, nil)
		require.NoError(t, err)
		return waitResult(t, proc).ExitCode
	}
	before := wasm.CompileCount()
	assert.Equal(t, 7, run(wasm.Options{}, path))
	assert.EqualValues(t, 1, wasm.CompileCount()-before, "the first start compiles")
	assert.Equal(t, 7, run(wasm.Options{}, path))
	assert.Equal(t, 7, run(wasm.Options{Timeout: time.Minute, MemoryBytes: 1 << 20}, path), "limits are per start, not part of the compile")
	assert.EqualValues(t, 1, wasm.CompileCount()-before, "later starts in this process do not")

	other := writeModule(t, dir, "copy.wasm", exitModule(7))
	assert.Equal(t, 7, run(wasm.Options{}, other))
	assert.EqualValues(t, 1, wasm.CompileCount()-before, "same bytes, other path: the same compiled module")

	assert.Equal(t, 7, run(wasm.Options{Interpreter: true}, path))
	assert.EqualValues(t, 2, wasm.CompileCount()-before, "another engine setting compiles its own")
	n, _ := wasm.CachedModules()
	assert.Equal(t, 2, n)
}

// TestEachStartIsAFreshInstance: a module that increments a counter in its memory and exits
// with it sees 1 every time, run after run and side by side: runs of one compiled module
// share no memory.
func TestEachStartIsAFreshInstance(t *testing.T) {
	wasm.ForgetCompiled()
	// mem[0] = mem[0] + 1; exit(mem[0])
	code := []byte{0x41, 0, 0x41, 0, 0x28, 2, 0, 0x41, 1, 0x6a, 0x36, 2, 0, 0x41, 0, 0x28, 2, 0}
	code = append(code, 0x10, 0)
	path := writeModule(t, t.TempDir(), "m.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, code))
	for range 3 {
		p, err := startModule(t, wasm.Options{}, path, nil, nil)
		require.NoError(t, err)
		assert.Equal(t, 1, waitResult(t, p).ExitCode)
	}
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := wasm.New(wasm.Options{})
			if !assert.NoError(t, err) {
				return
			}
			defer w.Close()
			p, err := w.Start(context.Background(), &sandbox.Spec{Path: path})
			if !assert.NoError(t, err) {
				return
			}
			r, _ := p.Wait()
			codes[i] = r.ExitCode
		}()
	}
	wg.Wait()
	assert.Equal(t, []int{1, 1, 1, 1}, codes)
}

// TestConcurrentRunsGetTheirOwnHostCalls: runs of one module share the runtime and the
// fledge host module; each run's recv and exit serve that run only (the host functions find
// their run through the call's context).
func TestConcurrentRunsGetTheirOwnHostCalls(t *testing.T) {
	wasm.ForgetCompiled()
	path := guest(t, "probe")
	var wg sync.WaitGroup
	got := make([]int, 6)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := wasm.New(wasm.Options{})
			if !assert.NoError(t, err) {
				return
			}
			defer w.Close()
			init := `{"type":"init","protocol":"fledge-v1","args":["exit","` + string(rune('3'+i)) + `"]}` + "\n"
			p, err := w.Start(context.Background(), &sandbox.Spec{Path: path, Stdin: strings.NewReader(init), Stdout: &bytes.Buffer{}})
			if !assert.NoError(t, err) {
				return
			}
			r, _ := p.Wait()
			got[i] = r.ExitCode
		}()
	}
	wg.Wait()
	assert.Equal(t, []int{3, 4, 5, 6, 7, 8}, got)
}

// TestUngrantedHostFunctionIsRefused: the shared runtime's host module has every fledge
// function, but a run without the exec grant is still refused at start for importing it,
// even when the same compiled module runs granted in this process.
func TestUngrantedHostFunctionIsRefused(t *testing.T) {
	wasm.ForgetCompiled()
	mod := assemble([]wimport{{"fledge", "exec", tPPtoI}, {"fledge", "exit", tI}}, 1, callExit(1, 0))
	path := writeModule(t, t.TempDir(), "m.wasm", mod)
	p, err := startModule(t, wasm.Options{Grants: protocol.Capabilities{Exec: true}}, path, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, waitResult(t, p).ExitCode, "granted: it starts")
	_, err = startModule(t, wasm.Options{}, path, nil, nil)
	var ce *wasm.CapabilityError
	require.ErrorAs(t, err, &ce, "the same compiled module, not granted: refused before it runs")
	assert.Equal(t, "fledge.exec", ce.Import)
}

// TestCompiledCacheBounds: at most the configured number of modules and bytes are kept,
// least recently used out first; an evicted module is compiled again; a module over the
// byte bound is not kept; a module evicted while it runs keeps running and is stopped as
// usual.
func TestCompiledCacheBounds(t *testing.T) {
	wasm.ForgetCompiled()
	restore := wasm.SetCompiledBounds(2, 1<<30)
	t.Cleanup(func() { restore(); wasm.ForgetCompiled() })
	dir := t.TempDir()
	paths := map[uint32]string{}
	for _, c := range []uint32{1, 2, 3} {
		paths[c] = writeModule(t, dir, string(rune('a'+c))+".wasm", exitModule(c))
	}
	run := func(c uint32) int64 {
		before := wasm.CompileCount()
		p, err := startModule(t, wasm.Options{}, paths[c], nil, nil)
		require.NoError(t, err)
		require.Equal(t, int(c), waitResult(t, p).ExitCode)
		return wasm.CompileCount() - before
	}
	assert.EqualValues(t, 1, run(1))
	assert.EqualValues(t, 1, run(2))
	assert.EqualValues(t, 0, run(1), "1 is now the most recent")
	assert.EqualValues(t, 1, run(3), "evicts 2, the least recent")
	n, _ := wasm.CachedModules()
	assert.Equal(t, 2, n)
	assert.EqualValues(t, 0, run(1))
	assert.EqualValues(t, 1, run(2), "2 was evicted: compiled again")

	// A module over the byte bound is compiled for its run and not kept.
	wasm.ForgetCompiled()
	restore2 := wasm.SetCompiledBounds(8, 10)
	assert.EqualValues(t, 1, run(1))
	assert.EqualValues(t, 1, run(1))
	n, b := wasm.CachedModules()
	assert.Equal(t, 0, n)
	assert.Zero(t, b)
	restore2()

	// Evicted (and its runtime retired) while running: it runs on, and its deadline still
	// stops it.
	loop := writeModule(t, dir, "loop.wasm", assemble(nil, 1, loopForever))
	p, err := startModule(t, wasm.Options{Timeout: 300 * time.Millisecond}, loop, nil, nil)
	require.NoError(t, err)
	wasm.ForgetCompiled()
	r := waitResult(t, p)
	assert.True(t, r.TimedOut)
	assert.EqualValues(t, 1, run(3), "a start after it compiles again")
}

// TestChangedModuleIsNotServedFromMemory is the attack on the cache: in one long-lived host
// (this process, as `fledge serve`), the module is run and compiled, then replaced at the
// same path, first by bytes of the same length differing in one byte, then by another
// module, and last between the audit record and the start of one run. Each later run is
// verified again: the record names the new sha256, the new bytes are compiled and run (never
// the old compiled module), and a change after the record is refused and on record.
func TestChangedModuleIsNotServedFromMemory(t *testing.T) {
	wasm.ForgetCompiled()
	f := newFixture(t, "benchguest", protocol.Capabilities{Filesystem: "none"})
	original, err := os.ReadFile(f.opts.Program)
	require.NoError(t, err)
	lastStart := func() map[string]any {
		starts := f.records(audit.EventPluginStart)
		require.NotEmpty(t, starts)
		return starts[len(starts)-1].Details
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

	f.mustRun("hello")
	assert.Contains(t, f.stdout.String(), "ready")
	assert.Equal(t, sum(original), lastStart()["module_sha256"])
	compiled := wasm.CompileCount()
	f.mustRun("hello")
	assert.Equal(t, compiled, wasm.CompileCount(), "the second run is served from memory")

	// Same length, one byte different (in the go:buildid custom section: still a valid module).
	i := bytes.Index(original, []byte("go:buildid"))
	require.Positive(t, i)
	tampered := bytes.Clone(original)
	tampered[i+len("go:buildid")+4] ^= 0x01
	require.NoError(t, os.WriteFile(f.opts.Program, tampered, 0o644))
	f.stdout.Reset()
	f.mustRun("hello")
	assert.Contains(t, f.stdout.String(), "ready")
	assert.Equal(t, sum(tampered), lastStart()["module_sha256"], "the record names the bytes that ran")
	assert.Equal(t, compiled+1, wasm.CompileCount(), "the changed bytes were compiled, not served from memory")

	// Another module entirely: it is what runs.
	other := exitModule(42)
	require.NoError(t, os.WriteFile(f.opts.Program, other, 0o644))
	out, err := f.run("hello")
	require.NoError(t, err)
	assert.Equal(t, 42, out.ExitCode, "the new module ran")
	assert.Equal(t, sum(other), lastStart()["module_sha256"])

	// Changed after the audit record, before the start: refused, and on record.
	w, err := wasm.New(f.wopts)
	require.NoError(t, err)
	defer w.Close()
	details, err := w.Describe(f.opts.Program)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.opts.Program, original, 0o644)) // cached, compiled bytes
	opts := f.opts
	opts.PluginSandbox, opts.PluginStartDetails, opts.Args = w, details, []string{"hello"}
	f.stdout.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = fledgev1.Run(ctx, opts)
	require.ErrorIs(t, err, wasm.ErrChanged)
	assert.NotContains(t, f.stdout.String(), "ready", "nothing of the swapped-in module ran")
	assert.Equal(t, sum(other), lastStart()["module_sha256"], "the record names what was described")
	exits := f.records(audit.EventPluginExit)
	require.NotEmpty(t, exits)
	last := exits[len(exits)-1]
	assert.Equal(t, audit.Error, last.Decision)
	assert.Equal(t, false, last.Details["started"])
	assert.Contains(t, last.Details["error"], wasm.ErrChanged.Error())
}

// TestPrecompileFillsMemoryToo: Precompile (install) leaves the module compiled in this
// process as well as in the cache dir.
func TestPrecompileFillsMemoryToo(t *testing.T) {
	wasm.ForgetCompiled()
	dir := t.TempDir()
	path := writeModule(t, dir, "m.wasm", exitModule(5))
	w, err := wasm.New(wasm.Options{CacheDir: filepath.Join(dir, "cache")})
	require.NoError(t, err)
	require.NoError(t, w.Precompile(context.Background(), path))
	require.NoError(t, w.Close())
	before := wasm.CompileCount()
	p, err := startModule(t, wasm.Options{CacheDir: filepath.Join(dir, "cache")}, path, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 5, waitResult(t, p).ExitCode)
	assert.Equal(t, before, wasm.CompileCount())
}

// TestOneCompilePerModule: Describe starts the compile its Start needs, and Start uses it;
// starts of a new module side by side wait for one compile instead of each compiling it.
func TestOneCompilePerModule(t *testing.T) {
	t.Cleanup(wasm.ForgetCompiled)
	dir := t.TempDir()
	path := writeModule(t, dir, "m.wasm", exitModule(4))
	wasm.ForgetCompiled()
	before := wasm.CompileCount()
	w, err := wasm.New(wasm.Options{})
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Describe(path)
	require.NoError(t, err)
	p, err := w.Start(context.Background(), &sandbox.Spec{Path: path})
	require.NoError(t, err)
	assert.Equal(t, 4, waitResult(t, p).ExitCode)
	assert.EqualValues(t, 1, wasm.CompileCount()-before, "Describe's compile is Start's")

	path = writeModule(t, dir, "big.wasm", guestBytes(t, "probe"))
	wasm.ForgetCompiled()
	before = wasm.CompileCount()
	var wg sync.WaitGroup
	codes := make([]int, 4)
	for i := range codes {
		wg.Go(func() {
			w, err := wasm.New(wasm.Options{})
			if !assert.NoError(t, err) {
				return
			}
			defer w.Close()
			init := `{"type":"init","protocol":"fledge-v1","args":["exit","6"]}` + "\n"
			p, err := w.Start(context.Background(), &sandbox.Spec{Path: path, Stdin: strings.NewReader(init), Stdout: &bytes.Buffer{}})
			if !assert.NoError(t, err) {
				return
			}
			r, _ := p.Wait()
			codes[i] = r.ExitCode
		})
	}
	wg.Wait()
	assert.Equal(t, []int{6, 6, 6, 6}, codes)
	assert.EqualValues(t, 1, wasm.CompileCount()-before, "four starts, one compile")
}

func guestBytes(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(guest(t, name))
	require.NoError(t, err)
	return b
}
