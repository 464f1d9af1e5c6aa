// SPDX-License-Identifier: MIT

package plugin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/policy"
)

// PyPI sources: `fledge plugins install pypi:PACKAGE[==VERSION]`. The user's own pip (or
// uv), with the user's index settings, fetches wheels only; installing a wheel runs none of
// its code. A package with no wheel is built from its sdist only with --allow-sdist, by a
// confined install hook (network to the index only, writable staged dir only).

// DefaultPyPITimeout bounds one pip (or uv) step.
const DefaultPyPITimeout = 5 * time.Minute

// Bounds of what a PyPI install holds.
const (
	maxWheels     = 512
	maxWheelBytes = 128 << 20
)

var (
	// ErrNoPip: neither pip (for the chosen Python) nor uv is there to fetch with.
	ErrNoPip = errors.New("pip is not available")
	// ErrPyPIUnreachable: the package index could not be reached.
	ErrPyPIUnreachable = errors.New("the package index is unreachable")
	// ErrPyPINoPackage: the index has no such package (or no such version).
	ErrPyPINoPackage = errors.New("no such package on the index")
	// ErrPyPINoWheel: the package (or one of its dependencies) has no wheel for this
	// platform and Python; --allow-sdist builds it confined.
	ErrPyPINoWheel = errors.New("no wheel for this platform")
	// ErrPyPIFetch: pip or uv failed otherwise.
	ErrPyPIFetch = errors.New("could not fetch the package")
	// ErrPyPIPackage: the fetched package cannot run as an MCP server (no console script,
	// several and none chosen).
	ErrPyPIPackage = errors.New("the PyPI package cannot be installed as an MCP server")
	// ErrPythonInHome: the interpreter lies under $HOME, which the sandbox hides.
	ErrPythonInHome = errors.New("the Python interpreter is under your home dir")
	// ErrWheelMismatch: a wheel fetched again is not the one pinned (another sha256, another
	// set of distributions).
	ErrWheelMismatch = errors.New("a fetched wheel is not the pinned one")
)

// Wheel is one distribution installed, pinned: its name (normalised), version, the wheel
// file and its sha256. A distribution built from an sdist (--allow-sdist) has no wheel to
// pin: File and SHA256 are empty and Built is set. Fetched by uv, which checks each wheel
// against the index's hashes but leaves no wheel file, File names the unpacked RECORD (the
// wheel's own list of every file's hash) and SHA256 is its hash.
type Wheel struct {
	Name    string `toml:"name" json:"name"`
	Version string `toml:"version" json:"version"`
	File    string `toml:"file,omitempty" json:"file,omitempty"`
	SHA256  string `toml:"sha256,omitempty" json:"sha256,omitempty"`
	Built   bool   `toml:"built,omitempty" json:"built,omitempty"`
}

// PyPIRequest is how a PyPI plugin was asked for, kept in its entry in plugins.toml
// (Entry.PyPI), out of reach of any package code, with the lock of every wheel installed.
type PyPIRequest struct {
	Package string   `toml:"package" json:"package"`
	Version string   `toml:"version,omitempty" json:"version,omitempty"` // "" = latest
	Args    []string `toml:"args,omitempty" json:"args,omitempty"`
	Env     []string `toml:"env,omitempty" json:"env,omitempty"`
	Name    string   `toml:"name,omitempty" json:"name,omitempty"`
	// Bin is which console script, when the package has several.
	Bin        string   `toml:"bin,omitempty" json:"bin,omitempty"`
	Filesystem string   `toml:"filesystem,omitempty" json:"filesystem,omitempty"`
	Network    bool     `toml:"network,omitempty" json:"network,omitempty"`
	Secrets    []string `toml:"secrets,omitempty" json:"secrets,omitempty"`
	// Python is the interpreter the server runs with (and pip runs on); "" = /usr/bin/python3.
	Python string `toml:"python,omitempty" json:"python,omitempty"`
	// AllowSdist lets a package without a wheel be built from its sdist, confined.
	AllowSdist bool `toml:"allow_sdist,omitempty" json:"allow_sdist,omitempty"`
	// Wheels is the lock: every distribution installed. On a fetch again with Pinned set,
	// anything else is refused.
	Wheels []Wheel `toml:"wheels,omitempty" json:"wheels,omitempty"`
}

// PyPIOptions run one fetch.
type PyPIOptions struct {
	Request PyPIRequest
	// Dir is an empty dir the plugin tree is assembled in (as NPMOptions.Dir).
	Dir string
	// Pinned, when set, are the only wheels the fetch may produce (name, version, sha256):
	// a sync from fledge.lock, an update that must not change what it runs.
	Pinned  []Wheel
	Timeout time.Duration
	// Environ is pip's environment (default os.Environ()): the user's index settings.
	Environ []string
	// UV is the uv program to use when the Python has no pip ("": looked up outside $HOME).
	UV string
}

// PyPIPackage is what a fetch produced.
type PyPIPackage struct {
	Request  PyPIRequest
	Name     string
	Version  string
	Script   string // the console script the server runs ("" when built by the hook)
	Manifest *Manifest
	// Index is the index fetched from, as a destination (host:port), for the sdist build
	// hook's network; IndexURL the URL itself.
	Index, IndexURL string
	// Build says the package is built from its sdist by the install hook (--allow-sdist).
	Build bool
	// Tool is "pip" or "uv".
	Tool string
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var (
	pypiNameRe    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$`) })
	pypiVersionRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}$`) })
	pyIdentRe     = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	})
	scriptNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })
	normRe       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[-_.]+`) })
)

// NormalizePyPI is PEP 503's normalised project name.
func NormalizePyPI(name string) string { return strings.ToLower(normRe().ReplaceAllString(name, "-")) }

// asNPM is r seen through the rules an npm request's server settings follow (arguments,
// environment, secrets, capabilities, the plugin name): the same for every package source.
func (r *PyPIRequest) asNPM() *NPMRequest {
	return &NPMRequest{Package: "x", Version: r.Version, Args: r.Args, Env: r.Env, Name: r.Name,
		Filesystem: r.Filesystem, Network: r.Network, Secrets: r.Secrets}
}

// Check validates a request before anything is fetched.
func (r *PyPIRequest) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadSource}, a...)...)
	}
	switch {
	case !pypiNameRe().MatchString(r.Package):
		return bad("%q is not a PyPI project name", clip.Bytes(r.Package, 80))
	case r.Version != "" && !pypiVersionRe().MatchString(r.Version):
		return bad("version %q: give an exact version (pypi:%s==1.2.3)", clip.Bytes(r.Version, 80), r.Package)
	case r.Bin != "" && !scriptNameRe().MatchString(r.Bin):
		return bad("bin %q is not a console script name", clip.Bytes(r.Bin, 80))
	case r.Python != "" && (!filepath.IsAbs(r.Python) || badText(r.Python)):
		return bad("--python %q: an absolute path to an interpreter", clip.Bytes(r.Python, 80))
	case len(r.Wheels) > maxWheels:
		return bad("%d wheels, more than %d", len(r.Wheels), maxWheels)
	}
	n := r.asNPM()
	n.Version = ""
	return n.Check()
}

func (r *PyPIRequest) capabilities() Capabilities { return r.asNPM().capabilities() }

func (r *PyPIRequest) pluginName() string {
	n := r.asNPM()
	n.Package = NormalizePyPI(r.Package)
	return n.pluginName()
}

// Changes lists how r differs from prev, as NPMRequest.Changes (nil prev lists everything).
func (r *PyPIRequest) Changes(prev *PyPIRequest) []string {
	var p *NPMRequest
	if prev != nil {
		p = prev.asNPM()
		p.Package, p.Bin = prev.Package, prev.Bin
	}
	n := r.asNPM()
	n.Package, n.Bin = r.Package, r.Bin
	out := n.Changes(p)
	py := func(q *PyPIRequest) string {
		if q == nil || q.Python == "" {
			return DefaultPython
		}
		return q.Python
	}
	if prev == nil || py(prev) != py(r) {
		out = append(out, "python: "+py(r))
	}
	if prev == nil && r.AllowSdist || prev != nil && prev.AllowSdist != r.AllowSdist {
		out = append(out, fmt.Sprintf("build from sdist: %v", r.AllowSdist))
	}
	return out
}

// DecideBeforeFetchPyPI is DecideBeforeFetch for a PyPI request.
func DecideBeforeFetchPyPI(o InstallOptions, r PyPIRequest) error {
	m := Manifest{Plugin: Meta{Protocol: ProtocolMCP}, Capabilities: r.capabilities()}
	return grantsDecidable(o, r.pluginName(), m.Declared())
}

// DefaultPython is the interpreter a PyPI server runs with unless --python says otherwise:
// the system's, outside $HOME (python3 on PATH may be a version manager's shim in $HOME,
// which the sandbox hides).
const DefaultPython = "/usr/bin/python3"

// ResolvePython checks the interpreter a PyPI server would run with: an absolute path to an
// executable file, outside $HOME (also once its symlinks are resolved).
func ResolvePython(p string) (string, error) {
	if p == "" {
		p = DefaultPython
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: --python %q: give an absolute path", ErrBadSource, clip.Bytes(p, 80))
	}
	home, _ := os.UserHomeDir()
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: python %s: %v (install python3 system-wide, e.g. apt-get install python3 python3-pip, or pass --python)", ErrNoPip, p, err)
	}
	// Every hop of a chain of links counts: the sandbox follows them all, and one through
	// $HOME leads nowhere there.
	hops := []string{p, real}
	for hop, i := p, 0; i < 40; i++ {
		if d, err := filepath.EvalSymlinks(filepath.Dir(hop)); err == nil {
			hops = append(hops, d)
		}
		t, err := os.Readlink(hop)
		if err != nil {
			break
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(hop), t)
		}
		hop = t
		hops = append(hops, hop)
	}
	for _, q := range hops {
		if home != "" && home != "/" && policy.Within(q, home) {
			return "", fmt.Errorf("%w: %s is under %s, which the sandbox hides from every plugin; pass --python with an interpreter outside it (e.g. /usr/bin/python3)", ErrPythonInHome, q, home)
		}
	}
	st, err := os.Stat(real)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNoPip, p)
	}
	return p, nil
}

// TrustedPython checks an interpreter named by a file fledge did not get from the user on
// the command line (fledge.lock, which a repository carries): pip runs on it unconfined, so
// it must be a root-owned file no one else may write, in a root-owned dir no one else may
// write, outside the project (once its symlinks are resolved).
func TrustedPython(p, project string) error {
	if _, err := ResolvePython(p); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	if project != "" && policy.Within(real, project) {
		return fmt.Errorf("%w: python %s lies in the project", ErrUntrustedPython, p)
	}
	for _, q := range []string{real, filepath.Dir(real)} {
		if !rootOwned(q) {
			return fmt.Errorf("%w: python %s: %s is not owned by root or may be written by others", ErrUntrustedPython, p, q)
		}
	}
	return nil
}

// ErrUntrustedPython: an interpreter named by fledge.lock is not one fledge runs pip on.
var ErrUntrustedPython = errors.New("refusing an interpreter fledge.lock names")

// FetchPyPI fetches the package and its dependencies as wheels with the user's pip (or uv)
// and index settings, verifies them against Pinned when set, installs them into o.Dir/lib
// (no package code runs: a wheel is unpacked), and writes the plugin tree around it:
// bin/server (a wrapper running the console script with the chosen Python, isolated: only
// lib/ and the standard library on sys.path) and plugin.toml (protocol = "mcp"). With
// AllowSdist and no wheel, the tree gets an install hook that builds and installs it
// confined instead (Build).
func FetchPyPI(ctx context.Context, o PyPIOptions) (*PyPIPackage, error) {
	r := o.Request
	if err := r.Check(); err != nil {
		return nil, err
	}
	if r.Filesystem == "" {
		r.Filesystem = policy.FilesystemProject
	}
	py, err := ResolvePython(r.Python)
	if err != nil {
		return nil, err
	}
	if r.Python != "" {
		r.Python = py
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultPyPITimeout
	}
	environ := o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	f := &pyFetcher{py: py, environ: environ, timeout: timeout, dir: o.Dir, uv: o.UV}
	if err := f.pick(ctx); err != nil {
		return nil, err
	}
	spec := r.Package
	if r.Version != "" {
		spec += "==" + r.Version
	}
	pk := &PyPIPackage{Tool: f.tool}
	lib := filepath.Join(o.Dir, "lib")
	wheels, err := f.fetch(ctx, spec, lib)
	if errors.Is(err, ErrPyPINoWheel) && r.AllowSdist && o.Pinned == nil {
		// The hook gets the index the user's settings name, and no other network.
		pk.Build = true
		pk.IndexURL = f.indexURL(ctx)
		pk.Index = RegistryDestination(pk.IndexURL)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if o.Pinned != nil {
		if err := samePins(o.Pinned, wheels); err != nil {
			return nil, err
		}
	}
	script := ""
	version := r.Version
	if !pk.Build {
		r.Wheels = wheels
		for _, w := range wheels {
			if w.Name == NormalizePyPI(r.Package) {
				version = w.Version
			}
		}
		if version == "" {
			return nil, fmt.Errorf("%w: pip did not install %s itself", ErrPyPIPackage, r.Package)
		}
		if script, err = consoleScript(lib, r); err != nil {
			return nil, err
		}
	} else {
		r.Wheels = nil
		if version == "" {
			version = "sdist"
		}
	}
	run := script
	if run == "" {
		run = r.Bin
	}
	if err := writePyPITree(o.Dir, py, &r, run, version, pk); err != nil {
		return nil, err
	}
	man, _, err := ParseManifestFile(filepath.Join(o.Dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPyPIPackage, err)
	}
	pk.Request, pk.Name, pk.Version, pk.Script, pk.Manifest = r, r.pluginName(), version, script, man
	return pk, nil
}

// ParseManifestFile parses the manifest at path (bounded), without the checks of a whole
// plugin dir (LoadManifest's binaries).
func ParseManifestFile(path string) (*Manifest, []string, error) {
	data, err := readRegular(path, MaxManifestBytes)
	if err != nil {
		return nil, nil, err
	}
	return ParseManifest(data)
}

// samePins refuses a fetch whose wheels are not exactly the pinned ones.
func samePins(pinned, got []Wheel) error {
	key := func(w Wheel) string { return w.Name + " " + w.Version + " " + w.SHA256 }
	want := map[string]bool{}
	for _, w := range pinned {
		want[key(w)] = true
	}
	have := map[string]bool{}
	for _, w := range got {
		have[key(w)] = true
		if !want[key(w)] {
			for _, p := range pinned {
				if p.Name == w.Name {
					return fmt.Errorf("%w: %s %s has sha256 %s, pinned %s %s with %s", ErrWheelMismatch, w.Name, w.Version, w.SHA256, p.Name, p.Version, p.SHA256)
				}
			}
			return fmt.Errorf("%w: %s %s is not in the lock", ErrWheelMismatch, w.Name, w.Version)
		}
	}
	for _, p := range pinned {
		if !have[key(p)] {
			return fmt.Errorf("%w: %s %s (sha256 %s) was not fetched", ErrWheelMismatch, p.Name, p.Version, p.SHA256)
		}
	}
	return nil
}

// pyFetcher drives the user's pip (python -m pip) or uv.
type pyFetcher struct {
	py, uv, tool, dir string
	noPip             bool
	environ           []string
	timeout           time.Duration
}

// pick chooses pip for the interpreter, else uv outside $HOME. pip is not asked first (one
// Python start less on every install): a fetch whose pip is missing says so, and fetch
// comes back here with noPip.
func (f *pyFetcher) pick(ctx context.Context) error {
	if !f.noPip {
		f.tool = "pip"
		return nil
	}
	uv := f.uv
	if uv == "" {
		if p, err := findProgram("uv"); err == nil {
			uv = p
		}
	}
	if uv != "" {
		if _, err := f.run(ctx, uv, "--version"); err == nil {
			f.uv, f.tool = uv, "uv"
			return nil
		}
	}
	return fmt.Errorf("%w: neither %s -m pip nor uv (outside your home dir) runs; install pip system-wide (apt-get install python3-pip) or uv", ErrNoPip, f.py)
}

func (f *pyFetcher) run(ctx context.Context, prog string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, prog, args...)
	cmd.Dir = f.dir
	cmd.Env = append(append([]string{}, f.environ...), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PIP_USER=0", "PYTHONNOUSERSITE=1")
	var buf limitedBuffer
	buf.max = 64 << 10
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cctx.Err() == context.DeadlineExceeded {
		return buf.String(), fmt.Errorf("%w: timed out after %s", ErrPyPIFetch, f.timeout)
	}
	return buf.String(), err
}

// indexURL is the index the user's settings name (PIP_INDEX_URL / UV_INDEX_URL, pip.conf),
// else PyPI's.
func (f *pyFetcher) indexURL(ctx context.Context) string {
	env := map[string]string{}
	for _, kv := range f.environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if f.tool == "uv" {
		for _, k := range []string{"UV_DEFAULT_INDEX", "UV_INDEX_URL"} {
			if env[k] != "" {
				return env[k]
			}
		}
		return "https://pypi.org/simple"
	}
	if env["PIP_INDEX_URL"] != "" {
		return env["PIP_INDEX_URL"]
	}
	if out, err := f.run(ctx, f.py, "-m", "pip", "config", "list"); err == nil {
		found := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
				found[k] = strings.Trim(v, `'"`)
			}
		}
		for _, k := range []string{"install.index-url", "download.index-url", "global.index-url"} {
			if found[k] != "" {
				return found[k]
			}
		}
	}
	return "https://pypi.org/simple"
}

// fetch downloads spec and its dependencies as wheels (and nothing else), hashes them, and
// installs them into lib with no index and no dependency resolution of its own.
func (f *pyFetcher) fetch(ctx context.Context, spec, lib string) ([]Wheel, error) {
	if f.tool == "uv" {
		return f.fetchUV(ctx, spec, lib)
	}
	wdir := filepath.Join(f.dir, ".fledge-wheels")
	if err := os.Mkdir(wdir, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(wdir)
	out, err := f.run(ctx, f.py, "-m", "pip", "download", "--only-binary=:all:", "--no-cache-dir",
		"--retries", "1", "--timeout", "20", "--progress-bar", "off", "--dest", wdir, spec)
	if err != nil && !errors.Is(err, ErrPyPIFetch) && strings.Contains(out, "No module named pip") ||
		err != nil && errors.As(err, new(*exec.Error)) {
		f.noPip = true
		if perr := f.pick(ctx); perr != nil {
			return nil, perr
		}
		return f.fetchUV(ctx, spec, lib)
	}
	if err != nil {
		return nil, f.problem(ctx, spec, out, err)
	}
	ents, err := os.ReadDir(wdir)
	if err != nil {
		return nil, err
	}
	var wheels []Wheel
	var files []string
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".whl") {
			return nil, fmt.Errorf("%w: pip left %q, not a wheel", ErrPyPIFetch, clip.Bytes(e.Name(), 80))
		}
		if len(wheels) >= maxWheels {
			return nil, fmt.Errorf("%w: more than %d wheels", ErrPyPIPackage, maxWheels)
		}
		w, err := hashWheel(filepath.Join(wdir, e.Name()))
		if err != nil {
			return nil, err
		}
		wheels = append(wheels, w)
		files = append(files, filepath.Join(wdir, e.Name()))
	}
	if len(wheels) == 0 {
		return nil, fmt.Errorf("%w: pip fetched nothing for %s", ErrPyPIFetch, spec)
	}
	args := append([]string{"-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "--no-compile",
		"--no-warn-script-location", "--target", lib}, files...)
	if out, err := f.run(ctx, f.py, args...); err != nil {
		return nil, fmt.Errorf("%w: installing the wheels: %s", ErrPyPIFetch, pipProblem(out))
	}
	return wheels, tidyLib(lib)
}

// fetchUV resolves spec to pinned hashes with uv (wheels only) and installs exactly those,
// uv checking every wheel's hash. The lock keeps the hash of each distribution's wheel.
func (f *pyFetcher) fetchUV(ctx context.Context, spec, lib string) ([]Wheel, error) {
	req := filepath.Join(f.dir, ".fledge-requirements.txt")
	in := filepath.Join(f.dir, ".fledge-requirements.in")
	if err := os.WriteFile(in, []byte(spec+"\n"), 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(in)
	defer os.Remove(req)
	out, err := f.run(ctx, f.uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes", "--only-binary", ":all:",
		"--python", f.py, "--no-cache", "-o", req, in)
	if err != nil {
		return nil, f.problem(ctx, spec, out, err)
	}
	if out, err := f.run(ctx, f.uv, "pip", "install", "--quiet", "--require-hashes", "--only-binary", ":all:", "--no-deps",
		"--no-cache", "--python", f.py, "--target", lib, "-r", req); err != nil {
		return nil, fmt.Errorf("%w: uv: %s", ErrPyPIFetch, pipProblem(out))
	}
	var wheels []Wheel
	for _, d := range distInfos(lib) {
		w := Wheel{Name: NormalizePyPI(d.name), Version: d.version}
		// uv checked the wheel against the hashes it resolved; the RECORD of what it
		// unpacked is what fledge can hash itself.
		sum, err := fileSHA256(filepath.Join(lib, d.dir, "RECORD"))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrPyPIFetch, d.dir, err)
		}
		w.File, w.SHA256 = d.dir+"/RECORD", sum
		wheels = append(wheels, w)
	}
	return wheels, tidyLib(lib)
}

// problem classifies a failed fetch: an unreachable index, no such package, no wheel.
func (f *pyFetcher) problem(ctx context.Context, spec, out string, err error) error {
	if errors.Is(err, ErrPyPIFetch) {
		return fmt.Errorf("%w: %s", err, spec)
	}
	msg := pipProblem(out)
	if regexp.MustCompile(`(?i)NewConnectionError|Max retries exceeded|Failed to establish|Connection refused|Name or service not known|Temporary failure in name resolution|Network is unreachable|Could not fetch URL|ConnectTimeout|Failed to fetch|error sending request|dns error|tcp connect error`).MatchString(out) {
		return fmt.Errorf("%w (%s): %s", ErrPyPIUnreachable, scrubOutput(f.indexURL(ctx)), msg)
	}
	if regexp.MustCompile(`(?i)No matching distribution|Could not find a version|not found in the package registry|no version of|Because .* was not found|only has source distributions|has no wheels`).MatchString(out) {
		name := strings.SplitN(spec, "==", 2)[0]
		if f.tool == "pip" {
			// pip index versions reads the same index and runs no package code: does the
			// project have any release this pip could install from source?
			vout, verr := f.run(ctx, f.py, "-m", "pip", "index", "versions", "--retries", "1", "--timeout", "20", name)
			if verr != nil && regexp.MustCompile(`(?i)No matching distribution`).MatchString(vout) {
				return fmt.Errorf("%w: %s: %s", ErrPyPINoPackage, spec, msg)
			}
			if _, want, ok := strings.Cut(spec, "=="); ok && verr == nil {
				for _, l := range strings.Split(vout, "\n") {
					if list, ok := strings.CutPrefix(strings.TrimSpace(l), "Available versions:"); ok &&
						!slices.Contains(strings.Split(strings.ReplaceAll(list, " ", ""), ","), want) {
						return fmt.Errorf("%w: %s has no version %s (it has: %s)", ErrPyPINoPackage, name, want, clip.Bytes(strings.TrimSpace(list), 200))
					}
				}
			}
			return fmt.Errorf("%w: %s has no wheel for this platform and Python (%s) among what it needs; --allow-sdist builds it from source, confined: %s", ErrPyPINoWheel, name, f.py, msg)
		}
		return fmt.Errorf("%w: %s (or no wheel for this platform; --allow-sdist builds from source): %s", ErrPyPINoPackage, spec, msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrPyPIFetch, spec, msg)
}

// pipProblem is the part of pip's (or uv's) output that says what went wrong, bounded.
func pipProblem(out string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "ERROR:") || strings.HasPrefix(l, "error:") || strings.HasPrefix(l, "×") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		keep = lines[max(0, len(lines)-3):]
	}
	if len(keep) > 4 {
		keep = keep[:4]
	}
	return clip.Bytes(scrubOutput(strings.Join(keep, "; ")), 600)
}

// hashWheel names and hashes a wheel file: {name}-{version}(-{build})?-{py}-{abi}-{plat}.whl.
func hashWheel(path string) (Wheel, error) {
	base := filepath.Base(path)
	parts := strings.Split(strings.TrimSuffix(base, ".whl"), "-")
	if len(parts) < 5 || len(parts) > 6 || !pypiNameRe().MatchString(parts[0]) || !pypiVersionRe().MatchString(parts[1]) {
		return Wheel{}, fmt.Errorf("%w: %q is not a wheel file name", ErrPyPIFetch, clip.Bytes(base, 80))
	}
	st, err := os.Lstat(path)
	if err != nil {
		return Wheel{}, err
	}
	if st.Size() > maxWheelBytes {
		return Wheel{}, fmt.Errorf("%w: %s is larger than %d bytes", ErrTreeTooLarge, base, maxWheelBytes)
	}
	sum, err := fileSHA256(path)
	if err != nil {
		return Wheel{}, err
	}
	return Wheel{Name: NormalizePyPI(parts[0]), Version: parts[1], File: base, SHA256: sum}, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, maxWheelBytes+1)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tidyLib removes what pip writes that differs per install (direct_url.json names the
// temporary wheel path, and RECORD its hash), so the same wheels give the same tree and
// the same digest on every machine.
func tidyLib(lib string) error {
	for _, d := range distInfos(lib) {
		if err := os.Remove(filepath.Join(lib, d.dir, "direct_url.json")); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		// RECORD lists it with its hash: that line goes too.
		rp := filepath.Join(lib, d.dir, "RECORD")
		data, err := readRegular(rp, MaxTreeBytes)
		if err != nil {
			return fmt.Errorf("%w: %s/RECORD: %v", ErrPyPIFetch, d.dir, err)
		}
		var keep []string
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if !strings.HasPrefix(l, d.dir+"/direct_url.json,") {
				keep = append(keep, l)
			}
		}
		if err := os.WriteFile(rp, []byte(strings.Join(keep, "")), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type distInfo struct{ dir, name, version string }

// distInfos lists lib's NAME-VERSION.dist-info dirs, sorted.
func distInfos(lib string) []distInfo {
	ents, _ := os.ReadDir(lib)
	var out []distInfo
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".dist-info")
		if !ok || !e.IsDir() {
			continue
		}
		name, ver, ok := strings.Cut(n, "-")
		if !ok {
			continue
		}
		out = append(out, distInfo{dir: e.Name(), name: name, version: ver})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dir < out[j].dir })
	return out
}

// consoleScript is the console script the server runs: --bin, the only one, or the one
// named like the package. It must name module:attr.
func consoleScript(lib string, r PyPIRequest) (string, error) {
	want := NormalizePyPI(r.Package)
	var scripts map[string]string
	for _, d := range distInfos(lib) {
		if NormalizePyPI(d.name) != want {
			continue
		}
		data, err := readRegular(filepath.Join(lib, d.dir, "entry_points.txt"), MaxManifestBytes)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %s/entry_points.txt: %v", ErrPyPIPackage, d.dir, err)
		}
		scripts = parseConsoleScripts(data)
	}
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	pick := ""
	switch {
	case r.Bin != "":
		if _, ok := scripts[r.Bin]; !ok {
			return "", fmt.Errorf("%w: it has no console script %q (it has: %s)", ErrPyPIPackage, r.Bin, strings.Join(names, ", "))
		}
		pick = r.Bin
	case len(names) == 1:
		pick = names[0]
	case len(names) == 0:
		return "", fmt.Errorf("%w: %s declares no console script ([console_scripts] in entry_points.txt)", ErrPyPIPackage, r.Package)
	default:
		for _, n := range names {
			if NormalizePyPI(n) == want {
				pick = n
			}
		}
		if pick == "" {
			return "", fmt.Errorf("%w: it has several console scripts (%s); choose one with --bin", ErrPyPIPackage, strings.Join(names, ", "))
		}
	}
	mod, attr, ok := strings.Cut(scripts[pick], ":")
	if !ok || !pyIdentRe().MatchString(mod) || !pyIdentRe().MatchString(attr) {
		return "", fmt.Errorf("%w: console script %s = %q is not module:function", ErrPyPIPackage, pick, clip.Bytes(scripts[pick], 80))
	}
	return pick, nil
}

// parseConsoleScripts reads the [console_scripts] section of an entry_points.txt.
func parseConsoleScripts(data []byte) map[string]string {
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "["):
			in = l == "[console_scripts]"
		case in:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				continue
			}
			v, _, _ = strings.Cut(strings.TrimSpace(v), "[") // extras
			if k = strings.TrimSpace(k); scriptNameRe().MatchString(k) && len(out) < 256 {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// launcher is bin/launch.py: it puts only the plugin's lib/ before the standard library on
// sys.path (the interpreter runs with -I -S: no user or system site-packages, no
// PYTHON* variables, not the script's dir) and runs the console script. The script is
// looked up in the installed distribution's entry points when the server starts, so a
// package built by the install hook runs the same way.
const launcher = `# Written by fledge: runs a console script of a PyPI package from this plugin dir.
import os, sys
lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")
sys.path.insert(0, lib)
import re
from importlib import metadata

def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()

def main(dist, script):
    eps = []
    for d in metadata.distributions(path=[lib]):
        if norm(d.metadata["Name"] or "") != norm(dist):
            continue
        eps = [e for e in d.entry_points if e.group == "console_scripts"]
        break
    pick = [e for e in eps if e.name == script] if script else eps
    if not script and len(pick) > 1:
        pick = [e for e in eps if norm(e.name) == norm(dist)]
    if len(pick) != 1:
        sys.stderr.write("fledge: %s has no single console script %r (it has: %s)\n" % (dist, script, ", ".join(e.name for e in eps)))
        return 127
    sys.argv[0] = pick[0].name
    return pick[0].load()()

if __name__ == "__main__":
    dist, script = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    sys.exit(main(dist, script))
`

// writePyPITree writes bin/server, bin/launch.py and plugin.toml into dir.
func writePyPITree(dir, py string, r *PyPIRequest, script, version string, pk *PyPIPackage) error {
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "launch.py"), []byte(launcher), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Written by fledge: runs the PyPI package's console script with the system Python,\n# isolated (-I -S): only this plugin dir's lib/ and the standard library on sys.path.\n")
	b.WriteString("here=$(dirname \"$0\")/..\n")
	for _, kv := range r.Env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellWord(v))
	}
	fmt.Fprintf(&b, "exec %s -I -S -B \"$here\"/bin/launch.py %s %s", shellQuote(py), shellQuote(r.Package), shellQuote(script))
	for _, a := range r.Args {
		b.WriteString(" " + shellArg(a))
	}
	b.WriteString("\n")
	if err := os.WriteFile(filepath.Join(dir, "bin", "server"), []byte(b.String()), 0o755); err != nil {
		return err
	}
	name := r.pluginName()
	if !ValidName(name) {
		return fmt.Errorf("%w: no plugin name can be made from %q; pass --name", ErrBadSource, r.Package)
	}
	m := struct {
		Plugin       Meta           `toml:"plugin"`
		Commands     []Command      `toml:"commands"`
		Capabilities Capabilities   `toml:"capabilities"`
		Hooks        map[string]any `toml:"hooks,omitempty"`
	}{
		Plugin: Meta{Name: name, Version: version, Description: "the MCP server of PyPI package " + r.Package, Protocol: ProtocolMCP},
		Commands: []Command{{Name: name, Binary: "bin/server",
			Description: "the MCP server of PyPI package " + r.Package}},
		Capabilities: r.capabilities(),
	}
	if pk.Build {
		m.Hooks = map[string]any{"pypi-build": sdistHook(py, r, pk.IndexURL)}
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Written by fledge for PyPI package %s %s.\n", r.Package, version)
	if err := toml.NewEncoder(&buf).Encode(m); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestFile), buf.Bytes(), 0o644)
}

// sdistHook is the install hook that builds and installs a package from source: pip in the
// staged dir, confined (the index its only network, the staged dir its only writable
// place, no $HOME), with no configuration of the user's (--isolated) but the index.
func sdistHook(py string, r *PyPIRequest, index string) string {
	spec := r.Package
	if r.Version != "" {
		spec += "==" + r.Version
	}
	trusted := ""
	if strings.HasPrefix(index, "http://") {
		if h := RegistryDestination(index); h != "" {
			host := h[:strings.LastIndex(h, ":")]
			trusted = " --trusted-host " + shellQuote(strings.Trim(host, "[]"))
		}
	}
	return fmt.Sprintf("%s -m pip install --isolated --no-cache-dir --disable-pip-version-check --no-input --no-compile "+
		"--no-warn-script-location --prefer-binary --retries 1 --timeout 20 --target lib --index-url %s%s %s",
		shellQuote(py), shellQuote(index), trusted, shellQuote(spec))
}

// BuiltWheels lists the distributions a build hook installed into dir/lib (no wheel to pin:
// Built), for the record.
func BuiltWheels(dir string) []Wheel {
	var out []Wheel
	for _, d := range distInfos(filepath.Join(dir, "lib")) {
		out = append(out, Wheel{Name: NormalizePyPI(d.name), Version: d.version, Built: true})
	}
	return out
}
