// SPDX-License-Identifier: MIT

package wasm_test

// Tests of the compilation cache on disk (the cache dir). A cache hit is trusted more than
// upstream wazero trusts it: its function bodies are not validated again (third_party/wazero,
// PATCHES.md). So an entry that is not exactly what was written for these bytes must never
// run: a corrupt, truncated, extended or foreign entry is dropped, the module is validated
// and compiled again, and the run is the module's own.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/wasm"
)

func requireCompiler(t *testing.T) {
	t.Helper()
	if w, _ := wasm.New(wasm.Options{}); w.Engine() != "compiler" {
		t.Skip("wazero keeps compiled code only for its compiler, not available on " + runtime.GOARCH)
	}
}

// cacheEntries are the compilation cache's entries of machine code (wazero keeps them in a
// subdirectory named for its version and platform), by path; mergedEntries fledge's entries
// of merged bytes beside them, keptEntries its copies of the modules it hashed.
func cacheEntries(t *testing.T, dir string) map[string][]byte {
	return entriesUnder(t, dir, func(p string) bool {
		return !strings.Contains(p, "/fledge-merged/") && !strings.Contains(p, "/fledge-modules/")
	})
}

func mergedEntries(t *testing.T, dir string) map[string][]byte {
	return entriesUnder(t, dir, func(p string) bool { return strings.Contains(p, "/fledge-merged/") })
}

func keptEntries(t *testing.T, dir string) map[string][]byte {
	return entriesUnder(t, dir, func(p string) bool { return strings.Contains(p, "/fledge-modules/") })
}

func entriesUnder(t *testing.T, dir string, keep func(string) bool) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && !strings.HasSuffix(p, ".tmp") && keep(p) {
			b, err := os.ReadFile(p)
			out[p] = b
			return err
		}
		return err
	}))
	return out
}

// onlyEntry compiles the module at path into an empty cache dir and returns its entry.
func onlyEntry(t *testing.T, cache, path string) (string, []byte) {
	t.Helper()
	wasm.ForgetCompiled()
	w, err := wasm.New(wasm.Options{CacheDir: cache})
	require.NoError(t, err)
	require.NoError(t, w.Precompile(context.Background(), path))
	require.NoError(t, w.Close())
	entries := cacheEntries(t, cache)
	require.Len(t, entries, 1)
	for p, b := range entries {
		return p, b
	}
	return "", nil
}

// entryLayout finds the parts of an entry: the function offsets (one per local function)
// start right after the header (magic, version, function count), as in upstream's format.
func entryLayout(t *testing.T, e []byte) (offsets int, nfuncs int) {
	t.Helper()
	require.Greater(t, len(e), 7)
	hdr := 6 + 1 + int(e[6]) + 4
	require.Greater(t, len(e), hdr)
	return hdr, int(binary.LittleEndian.Uint32(e[hdr-4 : hdr]))
}

// TestBadCacheEntryNeverRuns: the module exits 7. Its cache entry is replaced by a damaged
// or foreign one, then the module is started as by a new fledge process (nothing compiled in
// memory): it must exit 7, having been compiled again, and the entry must be rewritten as
// it was. Before the entries were checked, the foreign entry (the same shape of module,
// exiting 9) ran as this module and exited 9, and a corrupt function offset ran code from
// the middle of a function.
func TestBadCacheEntryNeverRuns(t *testing.T) {
	requireCompiler(t)
	t.Cleanup(wasm.ForgetCompiled)
	dir := t.TempDir()
	path := writeModule(t, dir, "m.wasm", exitModule(7))
	foreignPath := writeModule(t, dir, "other.wasm", exitModule(9))
	_, foreign := onlyEntry(t, filepath.Join(dir, "foreign-cache"), foreignPath)

	cache := filepath.Join(dir, "cache")
	entry, good := onlyEntry(t, cache, path)
	offs, n := entryLayout(t, good)
	require.Equal(t, 1, n, "the test module has one local function")
	require.Equal(t, len(good), len(foreign), "the foreign entry has the same shape")

	flip := func(i int) func([]byte) []byte {
		return func(e []byte) []byte { e[i] ^= 0x5a; return e }
	}
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"foreign entry of the same shape", func([]byte) []byte { return bytes.Clone(foreign) }},
		{"function offset moved into the function", func(e []byte) []byte {
			binary.LittleEndian.PutUint64(e[offs:], 3)
			return e
		}},
		{"byte of the header", flip(8)},
		{"byte of the function count", flip(offs - 4)},
		// The code ends 13 bytes before the entry does (its checksum, the source map flag,
		// the catch table's length and the entry's checksum come after it).
		{"byte of the code", flip(len(good) - 20)},
		{"last byte", flip(len(good) - 1)},
		{"truncated by one byte", func(e []byte) []byte { return e[:len(e)-1] }},
		{"truncated to its header", func(e []byte) []byte { return e[:offs] }},
		{"bytes appended", func(e []byte) []byte { return append(e, 0, 0, 0, 0) }},
		{"empty", func([]byte) []byte { return nil }},
		{"not an entry", func(e []byte) []byte { return bytes.Repeat([]byte{0xcc}, len(e)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(entry, tc.damage(bytes.Clone(good)), 0o600))
			wasm.ForgetCompiled() // a new process: only the cache dir holds the code
			p, err := startModule(t, wasm.Options{CacheDir: cache}, path, nil, nil)
			require.NoError(t, err, "an unusable entry costs a compile, not the run")
			assert.Equal(t, 7, waitResult(t, p).ExitCode, "the module's own code ran")
			got, err := os.ReadFile(entry)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(good, got), "the entry was written again from a new compile")
			assert.Len(t, cacheEntries(t, cache), 1)
		})
	}

	// The rewritten entry is used as it is: a start from it runs the module.
	wasm.ForgetCompiled()
	p, err := startModule(t, wasm.Options{CacheDir: cache}, path, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 7, waitResult(t, p).ExitCode)
}

// TestForeignGoEntryNeverRuns: the same with Go-built guests, whose entries differ in shape:
// the probe guest's entry replaced by the hostfn guest's must not run hostfn's code as the
// probe. The probe then answers as itself.
func TestForeignGoEntryNeverRuns(t *testing.T) {
	requireCompiler(t)
	t.Cleanup(wasm.ForgetCompiled)
	dir := t.TempDir()
	_, foreign := onlyEntry(t, filepath.Join(dir, "foreign-cache"), guest(t, "hostfn"))
	cache := filepath.Join(dir, "cache")
	probe := guest(t, "probe")
	entry, good := onlyEntry(t, cache, probe)
	require.NoError(t, os.WriteFile(entry, foreign, 0o600))

	wasm.ForgetCompiled()
	w, err := wasm.New(wasm.Options{CacheDir: cache})
	require.NoError(t, err)
	defer w.Close()
	init := `{"type":"init","protocol":"fledge-v1","args":["exit","5"]}` + "\n"
	p, err := w.Start(context.Background(), &sandbox.Spec{Path: probe, Stdin: strings.NewReader(init), Stdout: &bytes.Buffer{}})
	require.NoError(t, err)
	assert.Equal(t, 5, waitResult(t, p).ExitCode, "the probe ran as itself")
	got, err := os.ReadFile(entry)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(good, got), "the probe's entry was written again")
}

// TestInvalidModuleIsValidatedWithACache: a module whose function body is invalid is refused
// with a cache dir as without one (a cache miss validates everything), and leaves no entry.
func TestInvalidModuleIsValidatedWithACache(t *testing.T) {
	requireCompiler(t)
	t.Cleanup(wasm.ForgetCompiled)
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	// i32.add with an empty stack: well-formed, invalid.
	path := writeModule(t, dir, "m.wasm", assemble([]wimport{{"fledge", "exit", tI}}, 1, []byte{0x6a, 0x1a}))
	for range 2 {
		wasm.ForgetCompiled()
		_, err := startModule(t, wasm.Options{CacheDir: cache}, path, nil, nil)
		require.Error(t, err)
		assert.ErrorIs(t, err, wasm.ErrModule)
		assert.Contains(t, err.Error(), "i32.add")
	}
	assert.Empty(t, cacheEntries(t, cache))
}

// TestCacheDirOnlyFledgeCanWrite: the cache holds machine code that runs unchecked, so it is
// used only where nothing else can write: a cache dir that others can write to, or that a
// plugin can reach through a preopen, is refused (fledge then runs without a cache).
func TestCacheDirOnlyFledgeCanWrite(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o777))
	_, err := wasm.New(wasm.Options{CacheDir: open})
	assert.ErrorIs(t, err, wasm.ErrCacheDir, "a world-writable cache dir")

	group := filepath.Join(dir, "group")
	require.NoError(t, os.Mkdir(group, 0o700))
	require.NoError(t, os.Chmod(group, 0o770))
	_, err = wasm.New(wasm.Options{CacheDir: group})
	assert.ErrorIs(t, err, wasm.ErrCacheDir, "a group-writable cache dir")

	data := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	_, err = wasm.New(wasm.Options{CacheDir: filepath.Join(data, "cache"), DataDir: data, Grants: protocol.Capabilities{Filesystem: "plugin"}})
	assert.ErrorIs(t, err, wasm.ErrCacheDir, "inside the plugin's writable preopen")
	// The same dir is fine for a plugin without that preopen.
	w, err := wasm.New(wasm.Options{CacheDir: filepath.Join(data, "cache")})
	require.NoError(t, err)
	require.NoError(t, w.Close())

	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(open, link))
	_, err = wasm.New(wasm.Options{CacheDir: link})
	assert.ErrorIs(t, err, wasm.ErrCacheDir, "a symlink to a world-writable dir")
}

// TestBadMergedEntryIsNeverUsed: a Go-built module's merged bytes are kept beside its machine
// code, and a new process maps them instead of merging again. An entry that is not exactly
// what was written for this module (damaged anywhere, cut short, extended, another module's,
// empty) is never used: the module is merged again, runs as itself, and the entry is written
// again as it was.
func TestBadMergedEntryIsNeverUsed(t *testing.T) {
	requireCompiler(t)
	if runtime.GOOS != "linux" {
		t.Skip("merged bytes are kept on Linux only")
	}
	t.Cleanup(wasm.ForgetCompiled)
	dir := t.TempDir()
	foreignCache := filepath.Join(dir, "foreign-cache")
	onlyEntry(t, foreignCache, guest(t, "hostfn"))
	var foreign []byte
	for _, b := range mergedEntries(t, foreignCache) {
		foreign = b
	}
	require.NotEmpty(t, foreign, "the hostfn guest's merged bytes were kept")

	cache := filepath.Join(dir, "cache")
	probe := guest(t, "probe")
	onlyEntry(t, cache, probe)
	entries := mergedEntries(t, cache)
	require.Len(t, entries, 1)
	var entry string
	var good []byte
	for p, b := range entries {
		entry, good = p, b
	}
	run := func(t *testing.T) {
		t.Helper()
		wasm.ForgetCompiled() // a new process: only the cache dir is warm
		w, err := wasm.New(wasm.Options{CacheDir: cache})
		require.NoError(t, err)
		defer w.Close()
		init := `{"type":"init","protocol":"fledge-v1","args":["exit","5"]}` + "\n"
		p, err := w.Start(context.Background(), &sandbox.Spec{Path: probe, Stdin: strings.NewReader(init), Stdout: &bytes.Buffer{}})
		require.NoError(t, err)
		assert.Equal(t, 5, waitResult(t, p).ExitCode, "the probe ran as itself")
	}

	before := wasm.MergeCount()
	run(t)
	assert.Equal(t, before, wasm.MergeCount(), "a good entry is used: nothing merged")

	flip := func(i int) func([]byte) []byte {
		return func(e []byte) []byte { e[i] ^= 0x5a; return e }
	}
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"byte of the magic", flip(0)},
		{"byte of the key", flip(10)},
		{"byte of the length", flip(42)},
		{"byte of the checksum", flip(50)},
		{"byte of the merged bytes", flip(len(good) / 2)},
		{"last byte", flip(len(good) - 1)},
		{"truncated by one byte", func(e []byte) []byte { return e[:len(e)-1] }},
		{"truncated to its header", func(e []byte) []byte { return e[:52] }},
		{"bytes appended", func(e []byte) []byte { return append(e, 0, 0, 0, 0) }},
		{"another module's entry", func([]byte) []byte { return bytes.Clone(foreign) }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(entry, tc.damage(bytes.Clone(good)), 0o600))
			before := wasm.MergeCount()
			run(t)
			assert.Equal(t, before+1, wasm.MergeCount(), "the bad entry was not used: the module was merged again")
			got, err := os.ReadFile(entry)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(good, got), "the entry was written again as it was")
		})
	}
}

// TestKeptCopyNamesTheBytesRead: a new process names a module it read by the sha256 of the
// copy fledge kept when it last hashed that module, instead of hashing it again, only when
// the copy is undamaged and the file is byte for byte that copy. Whatever is done to the
// copy or to the module, the record's module_sha256 is the sha256 of the bytes read.
func TestKeptCopyNamesTheBytesRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the copies are kept on Linux only")
	}
	t.Cleanup(wasm.ForgetCompiled)
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	path := writeModule(t, dir, "m.wasm", exitModule(7))
	other := exitModule(9)
	describe := func(t *testing.T) (recorded string, hashed bool) {
		t.Helper()
		wasm.ForgetCompiled() // a new process
		w, err := wasm.New(wasm.Options{CacheDir: cache})
		require.NoError(t, err)
		defer w.Close()
		before := wasm.HashCount()
		d, err := w.Describe(path)
		require.NoError(t, err)
		return d["module_sha256"].(string), wasm.HashCount() != before
	}
	sha := func(t *testing.T) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}

	got, hashed := describe(t)
	assert.Equal(t, sha(t), got)
	assert.True(t, hashed, "the first process hashes the module")
	entries := keptEntries(t, cache)
	require.Len(t, entries, 1)
	var entry string
	var good []byte
	for p, b := range entries {
		entry, good = p, b
	}
	got, hashed = describe(t)
	assert.Equal(t, sha(t), got)
	assert.False(t, hashed, "the next one compares with the copy")

	flip := func(i int) func([]byte) []byte {
		return func(e []byte) []byte { e[i] ^= 0x5a; return e }
	}
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"byte of the magic", flip(0)},
		{"byte of the sha256", flip(10)},
		{"byte of the length", flip(42)},
		{"byte of the checksum", flip(50)},
		{"byte of the copy", flip(len(good) - 3)},
		{"truncated by one byte", func(e []byte) []byte { return e[:len(e)-1] }},
		{"bytes appended", func(e []byte) []byte { return append(e, 0) }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(entry, tc.damage(bytes.Clone(good)), 0o600))
			got, hashed := describe(t)
			assert.Equal(t, sha(t), got, "the record names the bytes read")
			assert.True(t, hashed, "a bad copy is not used")
			b, err := os.ReadFile(entry)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(good, b), "the copy was written again")
		})
	}

	// The module replaced by another of the same size: hashed, and the copy is now its.
	require.NoError(t, os.WriteFile(path, other, 0o644))
	got, hashed = describe(t)
	assert.Equal(t, sha(t), got)
	assert.True(t, hashed, "changed bytes are hashed")
	got, hashed = describe(t)
	assert.Equal(t, sha(t), got)
	assert.False(t, hashed)
}
