// SPDX-License-Identifier: MIT

// Package wasm runs fledge-v1 plugins compiled to WebAssembly (wasm32-wasip1) inside the
// fledge process with wazero, as a sandbox.Sandbox. To the session it is one more way to
// start a plugin: Start takes the same Spec, the plugin talks fledge-v1 on the Spec's stdin
// and stdout, and Wait reports a sandbox.Result. The module's host functions (fledge.exec,
// store_get, metadata, ...) are turned into the same fledge-v1 requests a native plugin
// writes, so they reach the session's one implementation of pathguard, exec sandbox,
// limits and audit: one implementation, two transports.
//
// Confinement is by construction, the same on every OS: the module sees no environment, no
// inherited files, no sockets and no process API; the only directories are the preopens the
// filesystem grant allows (resolved through os.Root, so no symlink leads out); its linear
// memory and its wall-clock time are bounded.
package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/fledgehq/fledge/third_party/wazero"

	"github.com/fledgehq/fledge/pathguard"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox"
)

// Defaults for Options fields left zero.
const (
	DefaultMemoryBytes = 256 << 20
	DefaultTimeout     = 60 * time.Second
	// DefaultMessageMax bounds one message the guest sends (send, a host-function request);
	// the session drops longer lines anyway, so a longer one is dropped here with a warning.
	DefaultMessageMax = 1 << 20
	// DefaultInboundMax bounds one line from the session: an exec reply carries up to two
	// capped output streams.
	DefaultInboundMax = protocol.DefaultMaxWriteLine
	// MaxModuleBytes bounds the .wasm file read at start.
	MaxModuleBytes = 256 << 20
	// maxInbox bounds messages kept for recv while the guest waits in a host function.
	maxInbox = 4096
	// outputChunk bounds the text of one output message made from the guest's stdout.
	outputChunk = 32 << 10
	// CancelGrace is how long a session should give a module to act on its cancel before
	// it sends SIGTERM (which closes the module): a module reads the cancel only when it
	// next calls recv, and has no processes to clean up.
	CancelGrace = time.Second
)

// Confinement is what Report and the audit records say about a WASM plugin's sandbox.
const Confinement = "wasm"

var (
	// ErrCapability: the module imports a host function whose capability is not granted.
	ErrCapability = errors.New("capability not granted")
	// ErrModule: the file is not a usable wasm32-wasip1 command module.
	ErrModule = errors.New("unusable wasm module")
	// ErrChanged: the module's bytes differ from the ones described for the audit record.
	ErrChanged = errors.New("wasm module changed since it was described")
	// ErrCacheDir: the compilation cache dir is not one only fledge can write (New refuses
	// it; the caller may run without a cache).
	ErrCacheDir = errors.New("wasm compilation cache dir is not private to fledge")
)

// CapabilityError names the host function and the capability it needs.
type CapabilityError struct {
	Import     string // e.g. "fledge.exec"
	Capability string // e.g. "exec"
}

func (e *CapabilityError) Error() string {
	return fmt.Sprintf("the plugin imports %s, which needs the %q capability, and it was not granted", e.Import, e.Capability)
}

func (e *CapabilityError) Unwrap() error { return ErrCapability }

// Options configure the runtime for one plugin. The caller resolves policy into them.
type Options struct {
	// Grants are the plugin's granted capabilities: exec/store/metadata decide which host
	// functions exist; Filesystem decides the preopens.
	Grants protocol.Capabilities
	// ProjectRoot is preopened read-only at /project when Filesystem is "project".
	ProjectRoot string
	// DataDir (the plugin's private data dir) is preopened read-write at /plugin when
	// Filesystem is "plugin" or "project".
	DataDir string
	// MemoryBytes bounds the module's linear memory (default 256 MiB).
	MemoryBytes int64
	// Timeout bounds the module's wall-clock run time (default 60 s); past it the module is
	// closed and Wait reports TimedOut.
	Timeout time.Duration
	// CacheDir holds compiled modules across runs ("" = in memory only). wazero keys each
	// entry by the sha256 of the module bytes (and its own version and the CPU), so a
	// changed module never reuses a stale compile. Within one process compiled modules are
	// also kept in memory (compiled.go), keyed the same way by the bytes fledge verified.
	//
	// The machine code in it runs as it is, and a hit's function bodies are not validated
	// again (third_party/wazero/PATCHES.md), so New refuses a dir that others can write to
	// or replace, or that the plugin can reach through a preopen (ErrCacheDir). fledge's is
	// in its state dir, which no plugin and no command is given.
	CacheDir   string
	MessageMax int // bytes per message from the guest (default DefaultMessageMax)
	InboundMax int // bytes per line from the session (default DefaultInboundMax)
	// Interpreter forces wazero's interpreter instead of its compiler (tests, platforms
	// without the compiler pick it on their own).
	Interpreter bool
}

func (o Options) withDefaults() Options {
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MessageMax <= 0 {
		o.MessageMax = DefaultMessageMax
	}
	if o.InboundMax <= 0 {
		o.InboundMax = DefaultInboundMax
	}
	return o
}

// Preopen is one directory the module can see.
type Preopen struct {
	Guest    string `json:"guest"`
	Host     string `json:"host"`
	ReadOnly bool   `json:"read_only"`
}

// Preopens lists the directories the filesystem grant gives the module. fledge's levels rank
// none < plugin < project (policy/grants.go): "plugin" is the private data dir only,
// "project" adds the project read-only, as for a native plugin. "project-rw" gives a module
// no more than "project": a preopen is not a mount, so the protected paths (git hooks and
// configs) a native plugin's writable project keeps read-only could not be kept so here.
func (o Options) Preopens() []Preopen {
	var out []Preopen
	fsLevel := o.Grants.Filesystem
	if fsLevel == protocol.FilesystemProjectRW {
		fsLevel = protocol.FilesystemProject
	}
	if fsLevel == protocol.FilesystemProject && o.ProjectRoot != "" {
		out = append(out, Preopen{Guest: "/project", Host: o.ProjectRoot, ReadOnly: true})
	}
	if (fsLevel == protocol.FilesystemPlugin || fsLevel == protocol.FilesystemProject) && o.DataDir != "" {
		out = append(out, Preopen{Guest: "/plugin", Host: o.DataDir})
	}
	return out
}

// Sandbox runs WASM plugins. It implements sandbox.Sandbox and io.Closer.
type Sandbox struct {
	opts      Options
	eng       *engine // shared with every Sandbox of the same compile settings
	closeOnce sync.Once

	mu     sync.Mutex
	pinned map[string]pin // module path -> what Describe recorded
}

// pin is a module as Describe read and recorded it.
type pin struct {
	digest string // sha256, as in the plugin_start record
	data   []byte // the bytes hashed: Start runs only these
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// New returns a Sandbox for one plugin's options. A CacheDir that cannot be used is an
// error (the caller may retry without it).
func New(opts Options) (*Sandbox, error) {
	opts = opts.withDefaults()
	if opts.CacheDir != "" {
		dir, err := privateCacheDir(opts)
		if err != nil {
			return nil, err
		}
		opts.CacheDir = dir
	}
	eng, err := acquireEngine(engineKey{interpreter: opts.Interpreter, cacheDir: opts.CacheDir})
	if err != nil {
		return nil, err
	}
	return &Sandbox{opts: opts, eng: eng, pinned: map[string]pin{}}, nil
}

// privateCacheDir makes opts.CacheDir (0700) and returns it with symlinks resolved, or
// ErrCacheDir when it is not private to fledge: writable or replaceable by another user
// (checkCacheDirOwner), or inside a directory this plugin is given.
func privateCacheDir(opts Options) (string, error) {
	if err := os.MkdirAll(opts.CacheDir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrCacheDir, err)
	}
	dir, err := filepath.EvalSymlinks(opts.CacheDir)
	if err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrCacheDir, err)
	}
	if err := checkCacheDirOwner(dir); err != nil {
		return "", err
	}
	for _, pre := range opts.Preopens() {
		host := pre.Host
		if h, err := filepath.EvalSymlinks(host); err == nil {
			host = h
		}
		if pathguard.Within(dir, host) {
			return "", fmt.Errorf("%w: it is inside %s, which the plugin sees as %s", ErrCacheDir, pre.Host, pre.Guest)
		}
	}
	return dir, nil
}

// Close releases the Sandbox's hold on the shared runtime (compiled modules stay cached in
// memory, bounded, and on disk; a module still running keeps its own hold).
func (s *Sandbox) Close() error {
	s.closeOnce.Do(s.eng.release)
	return nil
}

// Engine says which wazero engine runs modules on this platform.
func (s *Sandbox) Engine() string {
	if s.opts.Interpreter || !compilerSupported() {
		return "interpreter"
	}
	return "compiler"
}

func compilerSupported() bool {
	switch runtime.GOARCH {
	case "amd64", "arm64":
		switch runtime.GOOS {
		case "linux", "darwin", "freebsd", "netbsd", "windows":
			return true
		}
	}
	return false
}

// Report: the runtime confines the module on every OS; there is no cgroup or tree to kill.
func (s *Sandbox) Report() sandbox.Report {
	return sandbox.Report{
		OS:             runtime.GOOS,
		Confinement:    Confinement,
		CgroupMode:     "none",
		NetworkDeny:    "wasi: no sockets",
		UnixSocketDeny: "wasi: no sockets",
		TreeKill:       "module close",
	}
}

// Describe hashes the module at path and returns what the plugin_start audit record should
// carry about it: runtime, module sha256, preopens, limits, host functions. Start then
// refuses to run different bytes from that path (ErrChanged), so the record names exactly
// what ran.
func (s *Sandbox) Describe(path string) (map[string]any, error) {
	defer paceGCForStart()()
	// With a cache dir the merged bytes are normally there (mergecache.go): not merged here.
	digest, data, merged, fresh, err := readVerified(path, knownModules(), s.opts.CacheDir == "" || !mergedCacheSupported, s.opts.CacheDir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.pinned[path] = pin{digest: digest, data: data}
	s.mu.Unlock()
	if fresh {
		s.prefetch(digest, data, merged)
	}
	pre := s.opts.Preopens()
	if pre == nil {
		pre = []Preopen{}
	}
	return map[string]any{
		"runtime":        "wasm",
		"engine":         s.Engine(),
		"module_sha256":  digest,
		"preopens":       pre,
		"memory_bytes":   s.opts.MemoryBytes,
		"timeout_ms":     s.opts.Timeout.Milliseconds(),
		"host_functions": s.hostFunctions(),
		// Replaces the native plugin's profile in the record: this is what the module gets.
		"profile": map[string]any{
			"confinement": Confinement, "network": "none", "secrets": []string{}, "unix_sockets": false, "environment": []string{},
			"processes": false, "preopens": pre, "memory_bytes": s.opts.MemoryBytes, "timeout_ms": s.opts.Timeout.Milliseconds(),
		},
	}, nil
}

// prefetch starts compiling (or loading from the cache dir) a module Describe read and
// hashed, so that the work overlaps what the session does before Start, which then finds it
// compiled or waits for it (engine.module). Nothing of the module runs here. A Describe
// without a Start costs only that compile, which is kept like any other. The compile is
// claimed before this returns: a Start that came first would otherwise compile it too,
// merging the data again without the merged bytes Describe made.
func (s *Sandbox) prefetch(digest string, data, merged []byte) {
	c, f, own := s.eng.lookup(digest)
	if c != nil {
		c.release()
		return
	}
	if !own {
		return // being compiled already
	}
	s.eng.hold()
	paced := paceGCForStart()
	go func() {
		defer s.eng.release()
		defer paced()
		if c, err := s.eng.fly(context.Background(), f, digest, data, merged); err == nil {
			c.release()
		}
	}()
}

// hostFunctions lists the fledge.* imports this plugin's grants provide.
func (s *Sandbox) hostFunctions() []string {
	out := []string{}
	for name, capName := range hostImports {
		if capName == "" || granted(s.opts.Grants, capName) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// openModule opens the module at path: a regular file only, without blocking.
func openModule(path string) (*os.File, os.FileInfo, error) {
	// O_NONBLOCK and a regular file only: a FIFO put where the module was would block this
	// open, and then its read, in fledge's process before any deadline exists.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrModule, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %v", ErrModule, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is not a regular file", ErrModule, filepath.Base(path))
	}
	return f, st, nil
}

// readAll reads f whole, bounded by MaxModuleBytes.
func readAll(f *os.File, st os.FileInfo) ([]byte, error) {
	// Sized from stat (one read for a multi-megabyte module, into a buffer nothing clears
	// first), still bounded by the limit if the file grows meanwhile.
	size := 512
	if st.Size() > 0 && st.Size() <= MaxModuleBytes {
		size = int(st.Size()) + 1
	}
	data := make([]byte, 0, size)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.Read(data[len(data):min(cap(data), MaxModuleBytes+1)])
		data = data[:len(data)+n]
		if len(data) > MaxModuleBytes {
			return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrModule, filepath.Base(f.Name()), MaxModuleBytes)
		}
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrModule, err)
		}
	}
}

// compareChunk bounds the buffer readVerified compares a module through.
const compareChunk = 256 << 10

// readVerified reads the module at path and returns its sha256 and the bytes to run. When
// the file is equal, byte for byte, to one of known (bytes already hashed: what Describe
// pinned, modules in the cache) it is compared with them chunk by chunk as it is read, and
// that one's digest and bytes are returned: no copy of the file is made and nothing is
// hashed again. Otherwise it is read whole (fresh) and named by the copy cacheDir keeps for
// path if the copy is of exactly these bytes (keptcopy.go), else hashed, and the copy
// written; when merge is set, mergeData of them is made meanwhile on another core and
// returned as merged (what will be compiled; else nil). Whatever the file does meanwhile,
// the bytes returned are the bytes the digest is of.
func readVerified(path string, known []pin, merge bool, cacheDir string) (digest string, data, merged []byte, fresh bool, err error) {
	f, st, err := openModule(path)
	if err != nil {
		return "", nil, nil, false, err
	}
	defer f.Close()
	var cands []pin
	for _, k := range known {
		if int64(len(k.data)) == st.Size() {
			cands = append(cands, k)
		}
	}
	if len(cands) > 0 {
		if m, err := compareFile(f, cands); err != nil {
			return "", nil, nil, false, fmt.Errorf("%w: %v", ErrModule, err)
		} else if m != nil {
			return m.digest, m.data, nil, false, nil
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", nil, nil, false, fmt.Errorf("%w: %v", ErrModule, err)
		}
	}
	if data, err = readAll(f, st); err != nil {
		return "", nil, nil, false, err
	}
	var merging sync.WaitGroup
	if merge {
		merging.Go(func() { merged = mergeData(data) })
	}
	digest, kept := keptDigest(cacheDir, path, data)
	if !kept {
		hashes.Add(1)
		sum := sha256.Sum256(data)
		digest = hex.EncodeToString(sum[:])
	}
	merging.Wait()
	if !kept {
		keepCopy(cacheDir, path, digest, data)
	}
	return digest, data, merged, true, nil
}

// compareFile reads f to its end and returns the candidate its bytes equal, or nil.
func compareFile(f *os.File, cands []pin) (*pin, error) {
	buf := make([]byte, compareChunk)
	var off int
	for {
		n, err := f.Read(buf)
		if n > 0 {
			live := cands[:0]
			for _, c := range cands {
				if off+n <= len(c.data) && bytes.Equal(c.data[off:off+n], buf[:n]) {
					live = append(live, c)
				}
			}
			cands = live
			off += n
			if len(cands) == 0 {
				return nil, nil
			}
		}
		if err == io.EOF {
			for i := range cands {
				if off == len(cands[i].data) {
					return &cands[i], nil
				}
			}
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// hostImports maps each fledge.* host function to the capability it needs ("" = always).
var hostImports = map[string]string{
	"send": "", "recv": "", "exit": "",
	"exec":      "exec",
	"store_set": "store", "store_get": "store",
	"metadata": "metadata",
}

func granted(g protocol.Capabilities, capName string) bool {
	switch capName {
	case "exec":
		return g.Exec
	case "store":
		return g.Store
	case "metadata":
		return g.Metadata
	}
	return false
}

// checkImports refuses, before anything runs, a module that imports what it may not have:
// a fledge host function whose capability is not granted (named in the error), a host
// function fledge does not provide, or any module other than fledge and WASI preview 1.
func (s *Sandbox) checkImports(cm wazero.CompiledModule) error {
	for _, fn := range cm.ImportedFunctions() {
		mod, name, _ := fn.Import()
		switch mod {
		case "wasi_snapshot_preview1":
			continue
		case "fledge":
			capName, ok := hostImports[name]
			if !ok {
				return fmt.Errorf("%w: it imports fledge.%s, which fledge does not provide", ErrModule, name)
			}
			if capName != "" && !granted(s.opts.Grants, capName) {
				return &CapabilityError{Import: "fledge." + name, Capability: capName}
			}
		default:
			return fmt.Errorf("%w: it imports %s.%s; only WASI preview 1 and fledge host functions are provided", ErrModule, mod, name)
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return fmt.Errorf("%w: it imports its memory; a plugin must define and export it", ErrModule)
	}
	for _, m := range cm.ExportedMemories() {
		if int64(m.Min())*65536 > s.opts.MemoryBytes {
			return fmt.Errorf("%w: its initial memory (%d pages) is over the %d-byte limit", ErrModule, m.Min(), s.opts.MemoryBytes)
		}
	}
	if _, ok := cm.ExportedFunctions()["_start"]; !ok {
		return fmt.Errorf("%w: no _start export (build a WASI command: GOOS=wasip1 GOARCH=wasm)", ErrModule)
	}
	return nil
}

// Precompile compiles the module at path into the compilation cache, so that the first run
// only loads it (install does this). Nothing of the module runs.
func (s *Sandbox) Precompile(ctx context.Context, path string) error {
	digest, data, merged, _, err := readVerified(path, knownModules(), true, s.opts.CacheDir)
	if err != nil {
		return err
	}
	c, err := s.eng.module(ctx, digest, data, merged)
	if err != nil {
		return err
	}
	c.release()
	return nil
}

// startSectionBound bounds a module's start section, which runs while Start instantiates
// the module (a WASI command has none; some toolchains put constructors there).
const startSectionBound = 5 * time.Second

// Start compiles (or finds in memory, or loads from the cache dir) and instantiates the
// module at spec.Path, then runs its _start in a goroutine. Everything that can refuse the
// plugin (an unreadable, changed or invalid module, an ungranted import) fails here, before
// the plugin runs.
func (s *Sandbox) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Process, error) {
	if spec == nil || spec.Path == "" {
		return nil, fmt.Errorf("%w: no module path", sandbox.ErrInvalidSpec)
	}
	defer paceGCForStart()()
	s.mu.Lock()
	want, pinned := s.pinned[spec.Path]
	s.mu.Unlock()
	known := []pin{want} // Describe pinned it: these bytes or none
	if !pinned {
		known = knownModules()
	}
	digest, data, merged, _, err := readVerified(spec.Path, known, false, s.opts.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
	}
	if pinned && digest != want.digest {
		return nil, fmt.Errorf("%w: %w (sha256 %s, recorded %s)", sandbox.ErrLaunch, ErrChanged, digest[:12], want.digest[:12])
	}

	c, err := s.eng.module(ctx, digest, data, merged)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
	}
	// The run holds the runtime and the compiled module until it ends (process.finish).
	s.eng.hold()
	fail := func(err error) (sandbox.Process, error) {
		c.release()
		s.eng.release()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
	}
	if err := s.checkImports(c.cm); err != nil {
		return fail(err)
	}
	p, err := newProcess(s, spec)
	if err != nil {
		return fail(err)
	}
	p.code = c
	// Before the instantiation: a module's start section runs in it (whatever
	// WithStartFunctions says), and nothing of the module may run before BeforeExec (its
	// plugin_start record, durable) said yes.
	if err := sandbox.RunBeforeExec(spec); err != nil {
		p.release()
		c.release()
		s.eng.release()
		return nil, err
	}
	// A start section runs in the instantiation, before there is a process the host could
	// stop: it gets startSectionBound, then the module is stopped as at a timeout (its
	// stdio closed too, which ends a write blocked on a pipe nobody reads yet) and, like a
	// _start, abandoned if it does not return within stopGrace (process.run).
	instantiated := make(chan error, 1)
	go func() { instantiated <- p.instantiate(s.eng.rt, c.cm, filepath.Base(spec.Path)) }()
	bound := time.NewTimer(startSectionBound)
	select {
	case err = <-instantiated:
		bound.Stop()
	case <-bound.C:
		p.stop(stopTimeout)
		p.closeStdio()
		grace := time.NewTimer(stopGrace)
		select {
		case err = <-instantiated:
			grace.Stop()
		case <-grace.C:
			go func() {
				<-instantiated
				p.closeModule()
				p.release()
				c.release()
				s.eng.release()
			}()
			return nil, fmt.Errorf("%w: %w: its start section ran over %s and did not return", sandbox.ErrLaunch, ErrModule, startSectionBound)
		}
		if err == nil {
			err = errors.New("stopped")
		}
		err = fmt.Errorf("%w: its start section ran over %s: %w", ErrModule, startSectionBound, err)
	}
	if err != nil {
		p.closeModule() // instantiated after all, as the bound ran out
		p.release()
		return fail(err)
	}
	if ctx != nil {
		stop := context.AfterFunc(ctx, func() { p.stop(stopCancelled) })
		p.onExit = append(p.onExit, func() { stop() })
	}
	if t := spec.Limits.Timeout; t > 0 && t < s.opts.Timeout {
		p.timeout = t
	}
	go p.run()
	return p, nil
}
