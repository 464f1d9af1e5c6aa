// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/ui/clip"
)

// Package sources: `fledge plugins install npm:<package>` (and, designed the same way,
// pypi:<package> through uvx and oci:<image>; see docs/protocols.md for what is missing).
const (
	SourceNPM  = "npm:"
	SourcePyPI = "pypi:"
	SourceOCI  = "oci:"
)

// NPMFile is where fledge once kept how an npm plugin was asked for: inside the plugin dir,
// where the package's install scripts (run confined, with that dir writable) can rewrite
// it. fledge writes it no more; the record lives in plugins.toml (Entry.NPM), and a file
// of this name is read only to migrate an older install, never trusted for a grant
// (ReadLegacyNPMRequest).
const NPMFile = "fledge-npm.json"

// DefaultNPMTimeout bounds one npm fetch.
const DefaultNPMTimeout = 5 * time.Minute

// Bounds of what an npm install request may carry.
const (
	maxNPMArgs     = 64
	maxNPMEnv      = 64
	maxNPMArgBytes = 4096
)

var (
	// ErrNoNPM: npm (or node) is not installed where fledge and the sandbox can use it.
	ErrNoNPM = errors.New("npm is not available")
	// ErrNPMFetch: npm could not fetch the package (registry unreachable, no such package
	// or version).
	ErrNPMFetch = errors.New("npm could not fetch the package")
	// ErrNPMPackage: the fetched package cannot be run as an MCP server (no entry point,
	// several and none chosen, a bad package.json).
	ErrNPMPackage = errors.New("the npm package cannot be installed as an MCP server")
	// ErrSourceUnsupported: a package source fledge knows but this machine cannot fetch.
	ErrSourceUnsupported = errors.New("package source not supported on this machine")
)

// NPMRequest is what the user asked for: the package, a version (range), the server's
// arguments and environment, and the plugin's name and declared capabilities.
//
// Once installed it is part of the plugin's entry in plugins.toml (Entry.NPM): fledge's own
// state, which no plugin, command or install script can reach, and what `plugins update`
// fetches the package again with.
type NPMRequest struct {
	Package string   `json:"package" toml:"package"`
	Version string   `json:"version,omitempty" toml:"version,omitempty"` // "" = latest
	Args    []string `json:"args,omitempty" toml:"args,omitempty"`
	Env     []string `json:"env,omitempty" toml:"env,omitempty"` // NAME=VALUE
	Name    string   `json:"name,omitempty" toml:"name,omitempty"`
	Bin     string   `json:"bin,omitempty" toml:"bin,omitempty"` // which of several bin entries
	// Filesystem and Network are the capabilities the written manifest declares (the user
	// grants them, or not, as for any plugin). Filesystem "" = project.
	Filesystem string `json:"filesystem,omitempty" toml:"filesystem,omitempty"`
	Network    bool   `json:"network,omitempty" toml:"network,omitempty"`
	// Secrets are the written manifest's [capabilities] secrets: NAME, or NAME@host:port
	// (bound: the server holds a placeholder, fledge puts the value into its requests to
	// those destinations only).
	Secrets []string `json:"secrets,omitempty" toml:"secrets,omitempty"`
}

// NPMOptions run one fetch.
type NPMOptions struct {
	Request NPMRequest
	// Dir is an empty dir the plugin tree is assembled in (on the same file system as the
	// plugins dir, so nothing is half-installed: Install copies it into its staging dir).
	Dir string
	// NPM and Node are the programs (default: looked up in PATH).
	NPM, Node string
	Timeout   time.Duration
	// Environ is npm's environment (default os.Environ()): the user's own npm with the
	// user's registry configuration. No package code runs in this step (--ignore-scripts);
	// install scripts run later as a confined install hook.
	Environ []string
}

// NPMPackage is what a fetch produced.
type NPMPackage struct {
	Request  NPMRequest
	Name     string // the plugin name
	Version  string // the resolved package version
	Entry    string // the entry point, relative to the plugin dir
	Scripts  []string
	Manifest *Manifest
	// Registry is the registry npm fetched from, as a destination ("host:port"), for the
	// install scripts' network; "" when npm does not say.
	Registry string
}

// IsPackageSource reports whether s names a package (npm:, pypi:, oci:) rather than a dir
// or git URL.
func IsPackageSource(s string) bool {
	for _, p := range []string{SourceNPM, SourcePyPI, SourceOCI, SourceOCIArchive} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
// npmNameRe is npm's rule for package names (lower case, url-safe, optionally scoped).
var npmNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`) })

// npmVersionRe accepts versions, ranges and dist-tags, nothing a shell or npm would read
// as an option or a URL.
var npmVersionRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9^~<>=*][A-Za-z0-9.^~<>=*+| -]{0,127}$`) })

// ValidNPMPackage reports whether name is a valid npm package name (at most 214 bytes).
func ValidNPMPackage(name string) bool { return len(name) <= 214 && npmNameRe().MatchString(name) }

// placeholders are the variables an argument or environment value may name; the wrapper
// expands them when the server starts (the project differs per run).
var placeholders = []string{"FLEDGE_PROJECT_ROOT", "FLEDGE_DATA_DIR", "FLEDGE_PLUGIN_DIR"}

// Check validates a request before anything is fetched.
func (r *NPMRequest) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadSource}, a...)...)
	}
	switch {
	case !ValidNPMPackage(r.Package):
		return bad("%q is not an npm package name", clip.Bytes(r.Package, 80))
	case strings.HasPrefix(r.Version, "file:"):
		// A tarball made by `npm pack`: npm's own spelling for a local package.
		path := strings.TrimPrefix(r.Version, "file:")
		if !filepath.IsAbs(path) || !strings.HasSuffix(path, ".tgz") || badText(path) {
			return bad("version %q: a local package is file:/absolute/path/name-version.tgz (made by npm pack)", clip.Bytes(r.Version, 80))
		}
	case r.Version != "" && !npmVersionRe().MatchString(r.Version):
		return bad("version %q is not a version, range, tag or file:/path.tgz", clip.Bytes(r.Version, 80))
	case r.Name != "" && !ValidName(r.Name):
		return bad("plugin name %q must match [a-z0-9][a-z0-9_-]*", clip.Bytes(r.Name, 80))
	case len(r.Args) > maxNPMArgs:
		return bad("%d server arguments, more than %d", len(r.Args), maxNPMArgs)
	case len(r.Env) > maxNPMEnv:
		return bad("%d environment variables, more than %d", len(r.Env), maxNPMEnv)
	case !policy.ValidFilesystem(r.Filesystem):
		return bad("filesystem %q: expected one of %s", clip.Bytes(r.Filesystem, 80), policy.FilesystemLevels)
	case r.Bin != "" && badText(r.Bin):
		return bad("bin %q", clip.Bytes(r.Bin, 80))
	case len(r.Secrets) > MaxSecrets:
		return bad("%d secrets, more than %d", len(r.Secrets), MaxSecrets)
	}
	secret := map[string]bool{}
	for _, e := range r.Secrets {
		name, _, err := policy.ParseSecretEntry(e)
		if err != nil {
			return bad("secret %q: %s", clip.Bytes(e, 80), strings.TrimPrefix(err.Error(), policy.ErrUnknownCapability.Error()+": "))
		}
		if secret[name] {
			return bad("secret %s is given twice", name)
		}
		secret[name] = true
	}
	for _, a := range r.Args {
		if len(a) > maxNPMArgBytes || strings.ContainsRune(a, 0) || badText(a) {
			return bad("server argument %q has control characters or is longer than %d bytes", clip.Bytes(a, 80), maxNPMArgBytes)
		}
	}
	for _, kv := range r.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(k) || len(v) > maxNPMArgBytes || badText(v) {
			return bad("environment %q: expected NAME=VALUE", clip.Bytes(kv, 80))
		}
		if strings.HasPrefix(k, "FLEDGE_") || k == "PATH" || k == "HOME" || strings.HasPrefix(k, "LD_") || k == "NODE_OPTIONS" {
			return bad("environment %q: %s is fledge's to set", clip.Bytes(kv, 80), k)
		}
		if secret[k] {
			// The wrapper's export would replace the secret (or its placeholder) fledge sets.
			return bad("environment %q: %s is a secret (--secret), fledge sets it", clip.Bytes(kv, 80), k)
		}
	}
	return nil
}

// capabilities are what the manifest written for r declares: the filesystem level asked for
// (default project) and the whole network when asked for; nothing else.
func (r *NPMRequest) capabilities() Capabilities {
	fs := r.Filesystem
	if fs == "" {
		fs = policy.FilesystemProject
	}
	c := Capabilities{Filesystem: fs, Network: NetworkCap{All: r.Network}}
	for _, e := range r.Secrets {
		if name, dests, err := policy.ParseSecretEntry(e); err == nil { // checked by Check
			c.Secrets = append(c.Secrets, policy.SecretEntry(name, dests))
		}
	}
	return c
}

// DecideBeforeFetch refuses, before anything is fetched, an install of r whose grants could
// not be decided once it was (o as Install gets it): what the written manifest declares is
// known from the request alone, so an install off a terminal without --yes or --grant, or
// with a --grant beyond it, fails at once instead of after the download.
func DecideBeforeFetch(o InstallOptions, r NPMRequest) error {
	m := Manifest{Plugin: Meta{Protocol: ProtocolMCP}, Capabilities: r.capabilities()}
	return grantsDecidable(o, r.pluginName(), m.Declared())
}

// pluginName is the plugin name for a package: --name, else the unscoped name with what a
// plugin name cannot hold replaced.
func (r *NPMRequest) pluginName() string {
	if r.Name != "" {
		return r.Name
	}
	n := r.Package
	if i := strings.LastIndex(n, "/"); i >= 0 {
		n = n[i+1:]
	}
	n = regexp.MustCompile(`[^a-z0-9_-]+`).ReplaceAllString(strings.ToLower(n), "-")
	n = strings.TrimLeft(n, "-_")
	if len(n) > MaxNameLen {
		n = n[:MaxNameLen]
	}
	return n
}

// PackagePluginName is the name a package source's plugin gets when no --name is given
// ("server-filesystem" for npm:@modelcontextprotocol/server-filesystem), "" for other
// sources: the managed policy's tool rules name a package's plugin by it, whatever name
// the user installed it under.
func PackagePluginName(source string) string {
	kind, pkg, _, err := ParsePackageSource(source)
	switch {
	case err != nil || pkg == "":
		return ""
	case kind == "npm":
		return (&NPMRequest{Package: pkg}).pluginName()
	case kind == "pypi":
		return (&PyPIRequest{Package: pkg}).pluginName()
	}
	return ""
}

// findProgram finds name in PATH (then the usual system dirs) outside the user's home: the
// sandbox gives plugins nothing of $HOME, so a version manager's node there cannot run them.
func findProgram(name string) (string, error) {
	cands := []string{}
	if p, err := exec.LookPath(name); err == nil {
		cands = append(cands, p)
	}
	for _, d := range []string{"/usr/bin", "/usr/local/bin", "/bin"} {
		cands = append(cands, filepath.Join(d, name))
	}
	home, _ := os.UserHomeDir()
	for _, c := range cands {
		abs, err := filepath.Abs(c)
		if err != nil {
			continue
		}
		if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		if home != "" && home != "/" && policy.Within(abs, home) {
			continue
		}
		return abs, nil
	}
	return "", fmt.Errorf("%w: %s not found outside your home dir (install Node.js and npm system-wide, e.g. apt-get install nodejs npm; a version manager's copy under $HOME is out of the sandbox's reach)", ErrNoNPM, name)
}

// FetchNPM fetches a package with npm into o.Dir, without running any of its code, and
// writes a plugin tree around it: package.json and package-lock.json (the pinned versions
// and integrity hashes of the whole dependency tree), node_modules/, bin/server (a wrapper
// that runs the package's entry point with node and the given arguments) and plugin.toml
// (protocol = "mcp"). Packages with install scripts get an install hook that runs them
// (npm rebuild) confined, in the staged copy; Install runs it.
func FetchNPM(ctx context.Context, o NPMOptions) (*NPMPackage, error) {
	r := o.Request
	if err := r.Check(); err != nil {
		return nil, err
	}
	if r.Filesystem == "" {
		r.Filesystem = policy.FilesystemProject
	}
	npm, node := o.NPM, o.Node
	for _, p := range []string{npm, node} {
		if st, err := os.Stat(p); p != "" && (err != nil || !st.Mode().IsRegular()) {
			return nil, fmt.Errorf("%w: %s is not there", ErrNoNPM, p)
		}
	}
	var err error
	if npm == "" {
		if npm, err = findProgram("npm"); err != nil {
			return nil, err
		}
	}
	if node == "" {
		if node, err = findProgram("node"); err != nil {
			return nil, err
		}
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultNPMTimeout
	}
	spec := r.Version
	if spec == "" {
		spec = "latest"
	}
	// A package.json of our own: npm writes the lock file next to it, which pins the tree.
	pj, _ := json.MarshalIndent(map[string]any{
		"name": "fledge-plugin-" + r.pluginName(), "private": true, "description": "written by fledge",
		"dependencies": map[string]string{r.Package: spec},
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(o.Dir, "package.json"), append(pj, '\n'), 0o644); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, npm, "install", "--ignore-scripts", "--no-audit", "--no-fund",
		"--no-update-notifier", "--omit=dev", "--install-links=false")
	cmd.Dir = o.Dir
	environ := o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	cmd.Env = append(append([]string{}, environ...), "npm_config_ignore_scripts=true", "npm_config_update_notifier=false", "npm_config_yes=false")
	var buf limitedBuffer
	buf.max = 32 << 10
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := npmProblem(buf.String())
		if cctx.Err() == context.DeadlineExceeded {
			msg = fmt.Sprintf("timed out after %s", timeout)
		}
		return nil, fmt.Errorf("%w: %s@%s: %s", ErrNPMFetch, r.Package, spec, msg)
	}

	pkgDir := filepath.Join(o.Dir, "node_modules", filepath.FromSlash(r.Package))
	meta, err := readPackageJSON(pkgDir)
	if err != nil {
		return nil, err
	}
	if meta.Name != r.Package {
		return nil, fmt.Errorf("%w: node_modules/%s/package.json names %q", ErrNPMPackage, r.Package, clip.Bytes(meta.Name, 80))
	}
	entry, err := meta.entry(r)
	if err != nil {
		return nil, err
	}
	if !filepath.IsLocal(entry) {
		return nil, fmt.Errorf("%w: entry point %q leaves the package", ErrNPMPackage, clip.Bytes(entry, 80))
	}
	entryRel := filepath.ToSlash(filepath.Join("node_modules", filepath.FromSlash(r.Package), entry))
	if st, err := os.Stat(filepath.Join(o.Dir, entryRel)); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: entry point %s is not a file in the package", ErrNPMPackage, entryRel)
	}
	// The MCP registry's server.json, where the package ships one (else fledge's known
	// defaults for it, npmdefaults.go): its arguments and environment defaults apply when
	// the user gave none.
	if sj, err := defaultsFor(pkgDir, r.Package); err == nil && sj != nil {
		if len(r.Args) == 0 {
			r.Args = sj.args
		}
		have := map[string]bool{}
		for _, n := range policy.SecretNames(r.Secrets) {
			have[n] = true // a default never replaces a secret fledge sets
		}
		for _, kv := range r.Env {
			k, _, _ := strings.Cut(kv, "=")
			have[k] = true
		}
		for _, kv := range sj.env {
			if k, _, _ := strings.Cut(kv, "="); !have[k] {
				r.Env = append(r.Env, kv)
			}
		}
		if err := r.Check(); err != nil {
			return nil, fmt.Errorf("%w: server.json: %w", ErrNPMPackage, err)
		}
	}
	scripts, err := lockInstallScripts(filepath.Join(o.Dir, "package-lock.json"))
	if err != nil {
		return nil, err
	}

	if err := os.MkdirAll(filepath.Join(o.Dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "bin", "server"), []byte(wrapperScript(node, entryRel, r.Args, r.Env)), 0o755); err != nil {
		return nil, err
	}
	name := r.pluginName()
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: no plugin name can be made from %q; pass --name", ErrBadSource, r.Package)
	}
	desc := meta.Description
	if badText(desc) {
		desc = ""
	}
	m := struct {
		Plugin       Meta           `toml:"plugin"`
		Commands     []Command      `toml:"commands"`
		Capabilities Capabilities   `toml:"capabilities"`
		Hooks        map[string]any `toml:"hooks,omitempty"`
	}{
		Plugin: Meta{Name: name, Version: meta.Version, Description: clip.Bytes(desc, 200), Protocol: ProtocolMCP},
		Commands: []Command{{Name: name, Binary: "bin/server",
			Description: "the MCP server of npm package " + r.Package}},
		Capabilities: r.capabilities(),
	}
	if len(scripts) > 0 {
		// Run confined in the staged copy: its only writable place is that dir; npm's
		// cache and logs go there too and are removed after.
		m.Hooks = map[string]any{"npm-install-scripts": "npm rebuild --foreground-scripts --no-audit --no-fund --offline " +
			"--cache .fledge-npm-cache --logs-max 0 --update-notifier false; s=$?; rm -rf .fledge-npm-cache; exit $s"}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by fledge for npm package %s@%s.\n", r.Package, meta.Version)
	if err := toml.NewEncoder(&b).Encode(m); err != nil {
		return nil, err
	}
	man, _, err := ParseManifest(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNPMPackage, err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, ManifestFile), b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return &NPMPackage{Request: r, Name: name, Version: meta.Version, Entry: entryRel, Scripts: scripts, Manifest: man,
		Registry: npmRegistry(ctx, npm, o.Dir, cmd.Env)}, nil
}

// wrapperScript runs node on the entry point with the arguments. Arguments are quoted
// literally except ${FLEDGE_PROJECT_ROOT}, ${FLEDGE_DATA_DIR} and ${FLEDGE_PLUGIN_DIR},
// which the shell expands when the server starts (shellArg).
func wrapperScript(node, entry string, args, env []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Written by fledge: runs the npm package's entry point from this plugin dir.\n")
	b.WriteString("here=$(dirname \"$0\")/..\n")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellWord(v))
	}
	// The entry is the package's to name (package.json "bin"/"main"): quoted like the rest.
	fmt.Fprintf(&b, "exec %s \"$here\"/%s", shellQuote(node), shellQuote(entry))
	for _, a := range args {
		b.WriteString(" " + shellArg(a))
	}
	b.WriteString("\n")
	return b.String()
}

// shellArg is shellWord for one argument, except that an argument that is only a
// placeholder is left out when its variable is empty: a server run without a project gets
// no argument rather than an empty one (which a server would read as its working directory).
func shellArg(a string) string {
	for _, p := range placeholders {
		if a == "${"+p+"}" {
			return `${` + p + `:+"${` + p + `}"}`
		}
	}
	return shellWord(a)
}

// shellWord quotes s for sh, leaving the placeholders expandable.
func shellWord(s string) string {
	var b strings.Builder
	b.WriteString("''")
	for s != "" {
		next, which := -1, ""
		for _, p := range placeholders {
			if i := strings.Index(s, "${"+p+"}"); i >= 0 && (next < 0 || i < next) {
				next, which = i, p
			}
		}
		if next < 0 {
			b.WriteString(shellQuote(s))
			break
		}
		if next > 0 {
			b.WriteString(shellQuote(s[:next]))
		}
		b.WriteString(`"${` + which + `}"`)
		s = s[next+len(which)+3:]
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// npmProblem is the line of npm's output that says what went wrong, bounded.
func npmProblem(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var keep []string
	for _, l := range lines {
		if strings.Contains(l, "ERR!") && !strings.Contains(l, "A complete log") && !strings.Contains(l, "ERR! code") {
			keep = append(keep, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "npm ERR!")))
		} else if strings.HasPrefix(strings.TrimSpace(l), "npm error") && !strings.Contains(l, "A complete log") {
			keep = append(keep, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "npm error")))
		}
	}
	if len(keep) == 0 {
		keep = lines
	}
	if len(keep) > 4 {
		keep = keep[:4]
	}
	msg := strings.Join(keep, "; ")
	if regexp.MustCompile(`ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH`).MatchString(out) {
		msg = "the npm registry is unreachable (" + msg + ")"
	}
	return clip.Bytes(scrubOutput(msg), 600)
}

type packageJSON struct {
	Name        string          `json:"name"`
	Version     string          `json:"version"`
	Description string          `json:"description"`
	Bin         json.RawMessage `json:"bin"`
	Main        string          `json:"main"`
}

func readPackageJSON(dir string) (*packageJSON, error) {
	data, err := readRegular(filepath.Join(dir, "package.json"), MaxManifestBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: package.json: %v", ErrNPMPackage, err)
	}
	var p packageJSON
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%w: package.json: %v", ErrNPMPackage, err)
	}
	if badText(p.Version) || p.Version == "" {
		return nil, fmt.Errorf("%w: package.json has no usable version", ErrNPMPackage)
	}
	return &p, nil
}

// entry is the package's entry point: its one bin, the bin the user chose, the bin named
// like the package, else main.
func (p *packageJSON) entry(r NPMRequest) (string, error) {
	bins := map[string]string{}
	var one string
	if len(p.Bin) > 0 && json.Unmarshal(p.Bin, &one) == nil && one != "" {
		bins[r.pluginName()] = one
	} else if len(p.Bin) > 0 {
		_ = json.Unmarshal(p.Bin, &bins)
	}
	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	switch {
	case r.Bin != "":
		if e, ok := bins[r.Bin]; ok {
			return filepath.Clean(e), nil
		}
		return "", fmt.Errorf("%w: it has no bin %q (it has: %s)", ErrNPMPackage, clip.Bytes(r.Bin, 80), strings.Join(names, ", "))
	case len(bins) == 1:
		return filepath.Clean(bins[names[0]]), nil
	case len(bins) > 1:
		unscoped := r.Package[strings.LastIndex(r.Package, "/")+1:]
		if e, ok := bins[unscoped]; ok {
			return filepath.Clean(e), nil
		}
		return "", fmt.Errorf("%w: it has several entry points (%s); choose one with --bin", ErrNPMPackage, strings.Join(names, ", "))
	case p.Main != "":
		return filepath.Clean(p.Main), nil
	}
	return "", fmt.Errorf("%w: package.json has neither bin nor main", ErrNPMPackage)
}

// serverJSON is the part of the MCP registry's server.json fledge uses: the npm package's
// positional arguments and environment variables with their values or defaults.
type serverJSON struct{ args, env []string }

func readServerJSON(dir, pkg string) (*serverJSON, error) {
	data, err := readRegular(filepath.Join(dir, "server.json"), MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Packages []struct {
			RegistryType     string `json:"registryType"`
			Identifier       string `json:"identifier"`
			PackageArguments []struct {
				Type    string `json:"type"`
				Name    string `json:"name"`
				Value   string `json:"value"`
				Default string `json:"default"`
			} `json:"packageArguments"`
			EnvironmentVariables []struct {
				Name    string `json:"name"`
				Value   string `json:"value"`
				Default string `json:"default"`
			} `json:"environmentVariables"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: server.json: %v", ErrNPMPackage, err)
	}
	out := &serverJSON{}
	for _, p := range doc.Packages {
		if p.RegistryType != "npm" || p.Identifier != pkg {
			continue
		}
		for _, a := range p.PackageArguments {
			v := a.Value
			if v == "" {
				v = a.Default
			}
			switch {
			case v == "":
			case a.Type == "named" && a.Name != "":
				out.args = append(out.args, a.Name, v)
			case a.Type == "positional" || a.Type == "":
				out.args = append(out.args, v)
			}
		}
		for _, ev := range p.EnvironmentVariables {
			v := ev.Value
			if v == "" {
				v = ev.Default
			}
			if ev.Name != "" && v != "" {
				out.env = append(out.env, ev.Name+"="+v)
			}
		}
		return out, nil
	}
	return nil, nil
}

// lockInstallScripts lists the packages of the lock file that have install scripts
// (npm marks them hasInstallScript), sorted.
func lockInstallScripts(path string) ([]string, error) {
	data, err := readRegular(path, MaxTreeBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: package-lock.json: %v", ErrNPMPackage, err)
	}
	var lock struct {
		Packages map[string]struct {
			HasInstallScript bool `json:"hasInstallScript"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return nil, fmt.Errorf("%w: package-lock.json: %v", ErrNPMPackage, err)
	}
	var out []string
	for k, p := range lock.Packages {
		if p.HasInstallScript {
			out = append(out, strings.TrimPrefix(k, "node_modules/"))
		}
	}
	sort.Strings(out)
	return out, nil
}

// ReadLegacyNPMRequest reads how an npm plugin installed by an older fledge was asked for,
// from NPMFile in its plugin dir. Its install scripts could have rewritten that file: the
// caller takes its capabilities from the approved manifest instead, and has the user
// confirm the rest once (protocolhost's update).
func ReadLegacyNPMRequest(configDir, name string) (*NPMRequest, error) {
	data, err := readRegular(filepath.Join(Dir(configDir, name), NPMFile), MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	var r NPMRequest
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", NPMFile, err)
	}
	return &r, r.Check()
}

// ParsePackageSource splits "npm:@scope/pkg@1.2.3" into the package and a version (the
// version may also come from --version; giving both is an error).
func ParsePackageSource(src string) (kind, pkg, version string, err error) {
	for _, p := range []string{SourceNPM, SourcePyPI, SourceOCI, SourceOCIArchive} {
		if strings.HasPrefix(src, p) {
			kind, pkg = strings.TrimSuffix(p, ":"), strings.TrimPrefix(src, p)
		}
	}
	if kind == "" {
		return "", "", "", fmt.Errorf("%w: %q is not a package source (npm:, pypi:, oci:, oci-archive:)", ErrBadSource, clip.Bytes(src, 80))
	}
	if kind == "npm" {
		if i := strings.LastIndex(pkg, "@"); i > 0 {
			pkg, version = pkg[:i], pkg[i+1:]
		}
	}
	if kind == "pypi" {
		if p, v, ok := strings.Cut(pkg, "=="); ok {
			pkg, version = p, v
		}
	}
	return kind, pkg, version, nil
}

// npmRegistry is the registry npm is configured for in this environment, as a destination
// ("host:port": the URL's port, else 443 for https and 80 for http); "" when npm does not
// say within a few seconds or says something that is not an http(s) URL.
func npmRegistry(ctx context.Context, npm, dir string, environ []string) string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, npm, "config", "get", "registry")
	cmd.Dir, cmd.Env = dir, environ
	var buf limitedBuffer
	buf.max = 4 << 10
	cmd.Stdout = &buf
	cmd.WaitDelay = 2 * time.Second
	if cmd.Run() != nil {
		return ""
	}
	return RegistryDestination(strings.TrimSpace(buf.String()))
}

// RegistryDestination turns a registry URL into the destination its fetches reach
// ("registry.npmjs.org:443"); "" for anything but an http(s) URL with a host.
func RegistryDestination(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// Changes lists, one line each, how r differs from prev (what the user approved before):
// another package, version or entry point, server arguments or environment variables the
// user did not give (a new version's server.json may add some), other capabilities. A
// nil prev (a record that cannot be trusted) lists everything r holds, for the user to
// confirm once. Empty: nothing to approve.
func (r *NPMRequest) Changes(prev *NPMRequest) []string {
	var out []string
	diff := func(what, was, now string) {
		switch {
		case prev == nil:
			out = append(out, fmt.Sprintf("%s: %s", what, now))
		case was != now:
			out = append(out, fmt.Sprintf("%s: %s (was %s)", what, now, was))
		}
	}
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		q := make([]string, len(l))
		for i, s := range l {
			q[i] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, " ")
	}
	p := prev
	if p == nil {
		p = &NPMRequest{}
	}
	diff("package", p.Package, r.Package)
	diff("version", or(p.Version, "latest"), or(r.Version, "latest"))
	diff("entry point (bin)", or(p.Bin, "the package's own"), or(r.Bin, "the package's own"))
	diff("server arguments", list(p.Args), list(r.Args))
	diff("environment", list(p.Env), list(r.Env))
	diff("filesystem", or(p.Filesystem, policy.FilesystemProject), or(r.Filesystem, policy.FilesystemProject))
	diff("network", fmt.Sprint(p.Network), fmt.Sprint(r.Network))
	if len(p.Secrets) > 0 || len(r.Secrets) > 0 {
		diff("secrets", list(p.Secrets), list(r.Secrets))
	}
	return out
}
