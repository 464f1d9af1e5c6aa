// SPDX-License-Identifier: MIT

package wasm_test

// Tests of the runtime itself, with small modules assembled here byte by byte: exact
// imports (one host function each), traps, exit codes, stops, the compilation cache.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/wasm"
)

// Function types used by the assembled modules.
const (
	tVoid   = 0 // () -> ()
	tPP     = 1 // (i32, i32) -> ()
	tPPtoI  = 2 // (i32, i32) -> i32
	tI      = 3 // (i32) -> ()
	opUnrch = 0x00
	opEnd   = 0x0b
)

type wimport struct {
	module, name string
	typ          byte
}

func leb(n uint32) []byte {
	var out []byte
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func wstr(s string) []byte { return append(leb(uint32(len(s))), s...) }

func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, leb(uint32(len(body)))...), body...)
}

// assemble builds a module importing imports, with one exported memory of memPages pages and
// an exported _start whose body is code (without the final end).
func assemble(imports []wimport, memPages uint32, code []byte) []byte {
	return assembleData(imports, memPages, code, nil)
}

// assembleData is assemble with data placed at address 0 of the memory.
func assembleData(imports []wimport, memPages uint32, code, data []byte) []byte {
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	types := []byte{4,
		0x60, 0, 0,
		0x60, 2, 0x7f, 0x7f, 0,
		0x60, 2, 0x7f, 0x7f, 1, 0x7f,
		0x60, 1, 0x7f, 0,
	}
	m = append(m, section(1, types)...)
	imp := leb(uint32(len(imports)))
	for _, i := range imports {
		imp = append(imp, wstr(i.module)...)
		imp = append(imp, wstr(i.name)...)
		imp = append(imp, 0x00, i.typ)
	}
	m = append(m, section(2, imp)...)
	m = append(m, section(3, []byte{1, tVoid})...)
	m = append(m, section(5, append([]byte{1, 0}, leb(memPages)...))...)
	exp := []byte{2}
	exp = append(exp, wstr("memory")...)
	exp = append(exp, 0x02, 0)
	exp = append(exp, wstr("_start")...)
	exp = append(exp, 0x00)
	exp = append(exp, leb(uint32(len(imports)))...)
	m = append(m, section(7, exp)...)
	body := append([]byte{0}, code...)
	body = append(body, opEnd)
	m = append(m, section(10, append([]byte{1}, append(leb(uint32(len(body))), body...)...))...)
	if data != nil {
		seg := []byte{1, 0, 0x41, 0, opEnd}
		seg = append(seg, leb(uint32(len(data)))...)
		m = append(m, section(11, append(seg, data...))...)
	}
	return m
}

// callExit is the body "fledge.exit(code)" where exit is import index idx.
func callExit(idx, code uint32) []byte {
	return append(append([]byte{0x41}, leb(code)...), append([]byte{0x10}, leb(idx)...)...)
}

var loopForever = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b} // loop br 0 end

func writeModule(t *testing.T, dir, name string, mod []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, mod, 0o644))
	return p
}

func startModule(t *testing.T, opts wasm.Options, path string, stdout, stderr *bytes.Buffer) (sandbox.Process, error) {
	t.Helper()
	w, err := wasm.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	spec := &sandbox.Spec{Kind: sandbox.KindPlugin, Name: "t", Path: path, Args: []string{path}}
	if stdout != nil {
		spec.Stdout = stdout
	}
	if stderr != nil {
		spec.Stderr = stderr
	}
	return w.Start(context.Background(), spec)
}

func waitResult(t *testing.T, p sandbox.Process) *sandbox.Result {
	t.Helper()
	done := make(chan *sandbox.Result, 1)
	go func() {
		r, err := p.Wait()
		assert.NoError(t, err)
		done <- r
	}()
	select {
	case r := <-done:
		require.NotNil(t, r)
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("module did not end")
		return nil
	}
}

func TestEachHostFunctionNeedsItsGrant(t *testing.T) {
	for _, tc := range []struct {
		name, capability string
		typ              byte
		grant            protocol.Capabilities
	}{
		{"exec", "exec", tPPtoI, protocol.Capabilities{Exec: true}},
		{"store_set", "store", tPP, protocol.Capabilities{Store: true}},
		{"store_get", "store", tPPtoI, protocol.Capabilities{Store: true}},
		{"metadata", "metadata", tPPtoI, protocol.Capabilities{Metadata: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mod := assemble([]wimport{{"fledge", tc.name, tc.typ}, {"fledge", "exit", tI}}, 1, callExit(1, 5))
			path := writeModule(t, t.TempDir(), "m.wasm", mod)

			// Without the grant: refused at start, naming the capability; nothing ran.
			others := protocol.Capabilities{Exec: tc.capability != "exec", Store: tc.capability != "store", Metadata: tc.capability != "metadata"}
			_, err := startModule(t, wasm.Options{Grants: others}, path, nil, nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, sandbox.ErrLaunch)
			assert.ErrorIs(t, err, wasm.ErrCapability)
			var ce *wasm.CapabilityError
			require.True(t, errors.As(err, &ce))
			assert.Equal(t, tc.capability, ce.Capability)
			assert.Equal(t, "fledge."+tc.name, ce.Import)
			assert.Contains(t, err.Error(), `"`+tc.capability+`" capability`)

			// With it: the module instantiates and runs to its exit(5).
			p, err := startModule(t, wasm.Options{Grants: tc.grant}, path, nil, nil)
			require.NoError(t, err)
			assert.Equal(t, 5, waitResult(t, p).ExitCode)
		})
	}
}

func TestRefusedModules(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		mod  []byte
		opts wasm.Options
		want string
	}{
		{"unknown fledge import", assemble([]wimport{{"fledge", "spawn", tPP}}, 1, nil), wasm.Options{}, "fledge.spawn, which fledge does not provide"},
		{"foreign module import", assemble([]wimport{{"env", "system", tPP}}, 1, nil), wasm.Options{}, "env.system"},
		{"initial memory over the limit", assemble(nil, 64, nil), wasm.Options{MemoryBytes: 1 << 20}, "over the 1048576-byte limit"},
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), wasm.Options{}, "unusable wasm module"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeModule(t, dir, "m.wasm", tc.mod)
			_, err := startModule(t, tc.opts, path, nil, nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, wasm.ErrModule)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestTrapAndExit(t *testing.T) {
	dir := t.TempDir()
	t.Run("unreachable", func(t *testing.T) {
		var stderr bytes.Buffer
		p, err := startModule(t, wasm.Options{}, writeModule(t, dir, "trap.wasm", assemble(nil, 1, []byte{opUnrch})), nil, &stderr)
		require.NoError(t, err)
		r := waitResult(t, p)
		assert.Contains(t, r.Trap, "unreachable")
		assert.Equal(t, 134, r.ExitCode)
		assert.False(t, r.OOMKilled)
		assert.Contains(t, stderr.String(), "fledge: wasm plugin trapped: ")
	})
	t.Run("fledge.exit", func(t *testing.T) {
		p, err := startModule(t, wasm.Options{}, writeModule(t, dir, "exit.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, callExit(0, 42))), nil, nil)
		require.NoError(t, err)
		r := waitResult(t, p)
		assert.Equal(t, 42, r.ExitCode)
		assert.Empty(t, r.Trap)
		assert.Equal(t, "wasm", r.Mode.Confinement)
	})
}

func TestStops(t *testing.T) {
	path := writeModule(t, t.TempDir(), "loop.wasm", assemble(nil, 1, loopForever))
	for _, tc := range []struct {
		name   string
		stop   func(p sandbox.Process) error
		signal string
		code   int
	}{
		{"SIGTERM", func(p sandbox.Process) error { return p.Signal(syscall.SIGTERM) }, "SIGTERM", 143},
		{"Kill", func(p sandbox.Process) error { return p.Kill() }, "SIGKILL", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := startModule(t, wasm.Options{}, path, nil, nil)
			require.NoError(t, err)
			require.NoError(t, tc.stop(p))
			r := waitResult(t, p)
			assert.Equal(t, tc.signal, r.Signal)
			assert.Equal(t, tc.code, r.ExitCode)
			assert.False(t, r.TimedOut)
		})
	}
	t.Run("context cancelled", func(t *testing.T) {
		w, err := wasm.New(wasm.Options{})
		require.NoError(t, err)
		defer w.Close()
		ctx, cancel := context.WithCancel(context.Background())
		p, err := w.Start(ctx, &sandbox.Spec{Path: path})
		require.NoError(t, err)
		cancel()
		r := waitResult(t, p)
		assert.True(t, r.Cancelled)
	})
	t.Run("wall clock", func(t *testing.T) {
		p, err := startModule(t, wasm.Options{Timeout: 500 * time.Millisecond}, path, nil, nil)
		require.NoError(t, err)
		r := waitResult(t, p)
		assert.True(t, r.TimedOut)
		assert.Equal(t, "SIGKILL", r.Signal)
	})
}

func TestDescribePinsTheModule(t *testing.T) {
	dir := t.TempDir()
	path := writeModule(t, dir, "m.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, callExit(0, 1)))
	w, err := wasm.New(wasm.Options{Grants: protocol.Capabilities{Filesystem: "project"}, ProjectRoot: dir, DataDir: dir})
	require.NoError(t, err)
	defer w.Close()
	d, err := w.Describe(path)
	require.NoError(t, err)
	assert.Equal(t, sha256File(t, path), d["module_sha256"])
	assert.Equal(t, []wasm.Preopen{{Guest: "/project", Host: dir, ReadOnly: true}, {Guest: "/plugin", Host: dir}}, d["preopens"])
	// The file changes between the audit record and the start: refused.
	writeModule(t, dir, "m.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, callExit(0, 2)))
	_, err = w.Start(context.Background(), &sandbox.Spec{Path: path})
	assert.ErrorIs(t, err, wasm.ErrChanged)
}

func cacheFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	require.NoError(t, filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n++
		}
		return err
	}))
	return n
}

// TestCompilationCache: a compiled module is reused from the cache dir by a later runtime,
// and a module whose bytes changed at the same path gets its own entry and runs as itself.
func TestCompilationCache(t *testing.T) {
	if w, _ := wasm.New(wasm.Options{}); w.Engine() != "compiler" {
		t.Skip("wazero keeps compiled code only for its compiler, not available on " + runtime.GOARCH)
	}
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	path := filepath.Join(dir, "m.wasm")
	run := func(code uint32) int {
		writeModule(t, dir, "m.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, callExit(0, code)))
		p, err := startModule(t, wasm.Options{CacheDir: cache}, path, nil, nil)
		require.NoError(t, err)
		return waitResult(t, p).ExitCode
	}
	assert.Equal(t, 7, run(7))
	first := cacheFiles(t, cache)
	require.Greater(t, first, 0, "the compile was stored")
	assert.Equal(t, 7, run(7))
	assert.Equal(t, first, cacheFiles(t, cache), "the same module reuses its entry")
	assert.Equal(t, 9, run(9), "a changed module never runs a stale compile")
	second := cacheFiles(t, cache)
	assert.Greater(t, second, first, "the changed module has its own entry")

	// Precompile (install) fills the cache; the run then finds its entry.
	writeModule(t, dir, "m.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, callExit(0, 11)))
	w, err := wasm.New(wasm.Options{CacheDir: cache})
	require.NoError(t, err)
	require.NoError(t, w.Precompile(context.Background(), path))
	require.NoError(t, w.Close())
	third := cacheFiles(t, cache)
	assert.Greater(t, third, second)
	p, err := startModule(t, wasm.Options{CacheDir: cache}, path, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 11, waitResult(t, p).ExitCode)
	assert.Equal(t, third, cacheFiles(t, cache), "the run used the precompiled entry")
}

// TestMalformedExecRequestStaysInTheModule: an exec argument that is not JSON is answered by
// the runtime with an error result (its length returned), and nothing reaches the session.
func TestMalformedExecRequestStaysInTheModule(t *testing.T) {
	bad := []byte("{not json")
	// exit(exec(0, len(bad)))
	code := []byte{0x41, 0}
	code = append(code, 0x41)
	code = append(code, leb(uint32(len(bad)))...)
	code = append(code, 0x10, 0, 0x10, 1)
	mod := assembleData([]wimport{{"fledge", "exec", tPPtoI}, {"fledge", "exit", tI}}, 1, code, bad)
	var stdout bytes.Buffer
	p, err := startModule(t, wasm.Options{Grants: protocol.Capabilities{Exec: true}}, writeModule(t, t.TempDir(), "m.wasm", mod), &stdout, nil)
	require.NoError(t, err)
	r := waitResult(t, p)
	assert.Empty(t, r.Trap)
	assert.Greater(t, r.ExitCode, len(`{"code":-1,"stdout":"","stderr":"fledge: malformed exec request: "}`), "exec returned the error reply's length")
	assert.Empty(t, stdout.String(), "no request was sent to the session")
}
