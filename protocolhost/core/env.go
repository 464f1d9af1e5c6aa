// SPDX-License-Identifier: MIT

package core

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/audit/otlp"
	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/internal/safefs"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/sandbox"
)

var (
	// ErrManifestChanged: plugin.toml is not the one the user approved at install.
	ErrManifestChanged = errors.New("plugin.toml changed since it was approved")
	// ErrContentChanged: the files of a plugin pinned by content changed since install.
	ErrContentChanged = errors.New("its files changed since install")
	// ErrBinary: a command's binary is missing, not executable or outside the plugin dir.
	ErrBinary = errors.New("command binary unusable")
)

// Env is everything a run needs that comes from the machine rather than from flags: the
// config and state dirs, the policy, the sandbox and the audit log.
type Env struct {
	ConfigDir string
	StateDir  string
	AuditPath string
	Config    *policy.Config
	Sandbox   sandbox.Sandbox
	// Trace: every session opened through this Env traces its runs (fledge run --trace):
	// each path and destination outside the grants is a kernel_denied record.
	Trace bool
	// ObserveSecrets (plugins learn) binds each granted unbound secret, for this Env's runs,
	// to every named destination the plugin was granted: the plugin holds a placeholder and
	// fledge puts the value in wherever it goes among them, recording where (net_http), so
	// learn can propose the binding it needs.
	ObserveSecrets bool
	// ServerStderr (-v): a server's stderr reaches the user's terminal as well as its log
	// (OpenServerLog).
	ServerStderr bool
	log          *audit.Log
	export       *otlp.Exporter // [audit] export's background sender; nil when off

	redactOnce sync.Once
	redactor   *audit.Redactor
}

// Redactor holds every secret value this Env handed a plugin: the audit log writes each
// record with them replaced by [secret:NAME], and fledge's own messages are passed through
// it before they are printed (Host.Redact).
func (e *Env) Redactor() *audit.Redactor {
	e.redactOnce.Do(func() { e.redactor = audit.NewRedactor() })
	return e.redactor
}

// NewSessionID is a fresh random session id.
func NewSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Audit opens the audit log once (lazily: read-only commands never need it).
func (e *Env) Audit() (*audit.Log, error) {
	if e.log != nil {
		return e.log, nil
	}
	// In config.toml 0 means "never" / "keep everything"; in audit.Options that is -1.
	rotate, total := e.Config.Audit.RotateBytes, e.Config.Audit.MaxTotalBytes
	if rotate == 0 {
		rotate = -1
	}
	if total == 0 {
		total = -1
	}
	witness, err := audit.ParseWitness(e.Config.Audit.Witness)
	if err != nil {
		return nil, err
	}
	l, err := audit.Open(e.AuditPath, audit.Options{
		Fsync:         audit.FsyncPolicy(e.Config.Audit.Fsync),
		RotateBytes:   rotate,
		MaxTotalBytes: total,
		Witness:       witness,
		WitnessError:  audit.WarnWitness(os.Stderr),
		Redact:        e.Redactor(),
	})
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", e.AuditPath, err)
	}
	if err := e.startExport(l); err != nil {
		// A misconfigured export must not go unnoticed, nor stop the log: the records stay
		// in it and are sent once the configuration is fixed.
		fmt.Fprintf(os.Stderr, "fledge: warning: %v (records stay in the log)\n", err)
	}
	e.log = l
	return l, nil
}

// Close waits for the sandbox's background cleanup and closes the audit log.
func (e *Env) Close() error {
	var err error
	if c, ok := e.Sandbox.(io.Closer); ok {
		// Finished runs' cgroups and temp dirs are removed in the background; wait for it.
		if cerr := c.Close(); cerr != nil {
			err = fmt.Errorf("sandbox cleanup: %w", cerr)
		}
	}
	if e.export != nil {
		// What this process wrote (and any backlog) goes now if the collector answers
		// within the bound; the rest is for the next process.
		e.export.Close(otlp.DefaultExitWait)
		e.export = nil
	}
	if e.log != nil {
		_ = e.log.Close()
	}
	return err
}

// NewRecorder is the recorder of a new session of plugin ref on this machine's sandbox.
func (e *Env) NewRecorder(log audit.Recorder, ref *audit.PluginRef, warn func(string)) *Recorder {
	r := NewRecorder(log, NewSessionID(), ref, e.Sandbox.Report(), warn)
	r.SetTrace(e.Trace)
	r.SetManagedPolicy(e.managedDigest())
	if e.Config != nil && e.Config.Audit.SessionMaxBytes != 0 {
		// policy.Parse validated the range; a value set another way keeps the default.
		_ = r.SetSessionBytes(e.Config.Audit.SessionMaxBytes)
	}
	announceNetworkOverride(e.Config, r, warn) // egress.go
	return r
}

// managedDigest is the digest of the managed policy in force ("" for none).
func (e *Env) managedDigest() string {
	if e.Config == nil || !e.Config.Managed.Active() {
		return ""
	}
	return e.Config.Managed.Digest
}

// Paths is the policy view of where things are for one plugin. Policy is lexical and
// Landlock follows symlinks when it opens a rule's path, so every path is resolved first: a
// PATH entry that is a symlink to $HOME must be judged as $HOME.
func (e *Env) Paths(pluginDir, dataDir string, proj *project.Info) policy.Paths {
	home, _ := os.UserHomeDir()
	var userPATH []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.IsAbs(d) {
			userPATH = append(userPATH, Resolved(d))
		}
	}
	p := policy.Paths{
		PluginDir:        Resolved(pluginDir),
		PluginDataDir:    Resolved(dataDir),
		ConfigDir:        Resolved(e.ConfigDir),
		StateDir:         Resolved(e.StateDir),
		AuditLog:         Resolved(e.AuditPath),
		UserPATH:         userPATH,
		Home:             Resolved(home),
		PluginDirEntries: dirEntries(pluginDir),
	}
	if proj != nil {
		p.ProjectRoot = proj.Root
	}
	p.VersionManagers = policy.DetectVersionManagers(userPATH, p.Home, OSLookup{})
	if len(p.VersionManagers) > 0 {
		// The managers read their version files from the working directory up (the
		// plugin's is the user's, or the project root).
		seen := map[string]bool{}
		dirs := []string{p.ProjectRoot}
		if wd, err := os.Getwd(); err == nil {
			dirs = append(dirs, Resolved(wd))
		}
		for _, d := range dirs {
			for _, f := range policy.VersionFilesFor(d, p.VersionManagers, OSLookup{}) {
				if !seen[f] {
					seen[f] = true
					p.VersionFiles = append(p.VersionFiles, f)
				}
			}
		}
	}
	return p
}

// OSLookup is policy.Lookup on the real filesystem.
type OSLookup struct{}

func (OSLookup) Exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func (OSLookup) RegularFile(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode().IsRegular()
}

func (OSLookup) Resolve(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

func (OSLookup) FirstEntry(dir string) string {
	f, err := os.Open(dir)
	if err != nil {
		return ""
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// Resolved is p with symlinks resolved as far as it exists (the missing tail kept).
func Resolved(p string) string {
	if p == "" {
		return ""
	}
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parent, base := filepath.Split(p)
	if parent == "" || filepath.Clean(parent) == p {
		return p
	}
	return filepath.Join(Resolved(filepath.Clean(parent)), base)
}

// dirEntries lists the top-level names of an installed plugin dir, so its profile can leave
// out the host's state file. Nil (allow the whole dir read-only) if it cannot be listed.
func dirEntries(dir string) []string {
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Binding is one installed plugin, verified to be what the user approved, ready to run.
type Binding struct {
	Entry    *plugin.Entry
	Manifest *plugin.Manifest
	Dir      string // the installed copy
	DataDir  string // its private writable dir
	Project  *project.Info
	Paths    policy.Paths
	Ref      *audit.PluginRef
	// secrets are the plugin process's secret variables (secrets.go): an unbound secret's
	// value, a bound secret's placeholder; never printed, recorded or passed to a command.
	secrets map[string]string
	// bound are the bound secrets (values with their placeholders and destinations), for
	// the session's network only; placeholders are what the plugin's commands hold.
	bound        []egress.Secret
	placeholders map[string]string
}

// Bind verifies the installed plugin entry (its manifest must be the approved one) and
// prepares its data dir. A refusal is recorded as a plugin_start deny when the audit log
// can take it: a run that did not happen is still on file.
func (e *Env) Bind(entry *plugin.Entry, proj *project.Info) (*Binding, error) {
	ref := &audit.PluginRef{Name: entry.Name, Version: entry.Version, Source: entry.Source, ManifestDigest: entry.ManifestSHA256}
	dir := plugin.Dir(e.ConfigDir, entry.Name)
	man, err := VerifyInstalled(dir, entry)
	if err != nil {
		kind := audit.RefusalOther
		switch {
		case errors.Is(err, ErrManifestChanged):
			kind = audit.RefusalManifestChanged
		case errors.Is(err, ErrContentChanged):
			kind = audit.RefusalContentChanged
		case errors.Is(err, plugin.ErrMissingBinary):
			// LoadManifest checks every command binary is there.
			kind = audit.RefusalBinaryUnusable
		}
		e.Refuse(ref, kind, "", err.Error())
		return nil, err
	}
	// A plugin installed before the managed ceiling was lowered runs with no more than the
	// ceiling allows: not at all, on record, until its grants are narrowed.
	if e.Config != nil {
		if err := e.Config.Managed.CheckPlugin(entry.Name, !man.HoldsGrants(), entry.Granted, entry.Read); err != nil {
			e.Refuse(ref, audit.RefusalOverCeiling, "", err.Error())
			return nil, err
		}
	}
	dataDir := plugin.DataDir(e.ConfigDir, entry.Name)
	// Beneath the config dir, never through a symlink: the data dir is the plugin's to write.
	if err := safefs.MkdirAll(e.ConfigDir, filepath.Join("plugins", entry.Name, "data"), 0o700); err != nil {
		e.Refuse(ref, audit.RefusalOther, "", "plugin data dir: "+err.Error())
		return nil, fmt.Errorf("plugin data dir: %w", err)
	}
	secrets, err := e.grantedSecrets(entry) // secrets.go
	if err != nil {
		e.Refuse(ref, audit.RefusalOther, "", err.Error())
		return nil, err
	}
	granted := entry.Granted.Secrets
	if e.ObserveSecrets {
		granted = observeBindings(entry.Granted)
	}
	env, bound, placeholders := bindSecrets(granted, secrets)
	return &Binding{
		Entry: entry, Manifest: man, Dir: dir, DataDir: dataDir, Project: proj,
		Paths: e.Paths(dir, dataDir, proj), Ref: ref, secrets: env, bound: bound, placeholders: placeholders,
	}, nil
}

// Program resolves the binary of a command of the bound plugin; a refusal is recorded.
func (e *Env) Program(b *Binding, rel string) (string, error) {
	// A WebAssembly module and an image's config are data for their runtime.
	p, err := BinaryPath(b.Dir, rel, b.Manifest.Plugin.Runtime == "")
	if err != nil {
		e.Refuse(b.Ref, audit.RefusalBinaryUnusable, "", err.Error())
		return "", err
	}
	return p, nil
}

// Refuse records that a run of the plugin was refused before it started (manifest changed,
// binary missing, strict sandbox unavailable): a plugin_start deny (audit.RecordRefusal).
// Best effort: when the audit log itself is the reason, there is nowhere to write it.
func (e *Env) Refuse(ref *audit.PluginRef, kind, command, message string) {
	log, err := e.Audit()
	if err != nil {
		return
	}
	rep := e.Sandbox.Report()
	_ = audit.RecordRefusal(log, audit.Refusal{
		Session: NewSessionID(), Plugin: ref, Command: command, Kind: kind, Message: message, ManagedPolicy: e.managedDigest(),
		Sandbox: &audit.SandboxInfo{Mode: rep.Confinement, LandlockABI: rep.LandlockABI, CgroupMode: rep.CgroupMode},
	})
}

// Profile builds the plugin's whole profile from policy (policy.Config.Build).
func (e *Env) Profile(b *Binding, environ []string, pluginEnv, legacyEnv map[string]string) policy.Profile {
	prof := e.Config.Build(policy.ProfileInput{
		Paths: b.Paths, Grants: b.Entry.Granted, Environ: environ, PluginEnv: pluginEnv, LegacyEnv: legacyEnv,
		Read:    resolvedReads(b.Entry.Read),
		Secrets: b.secrets, Bound: b.bound, Placeholders: b.placeholders,
		Image: b.Manifest.IsImage(),
	})
	trustSessionCA(&prof, environ, b.placeholders) // ca.go
	return prof
}

// VerifyInstalled loads the installed manifest and checks it is the one the user approved:
// a manifest edited after install (by anyone) must be re-approved, not silently trusted.
func VerifyInstalled(dir string, entry *plugin.Entry) (*plugin.Manifest, error) {
	man, _, err := plugin.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	if entry.ManifestSHA256 != "" && man.SHA256() != entry.ManifestSHA256 {
		return nil, fmt.Errorf("%w (sha256 %s, approved %s): reinstall it to review the change", ErrManifestChanged, man.SHA256()[:12], entry.ManifestSHA256[:min(12, len(entry.ManifestSHA256))])
	}
	// A plugin pinned by content (a PyPI package's unpacked wheels) runs only as installed:
	// a file changed in its dir since is refused like a changed manifest.
	if entry.PyPI != nil && entry.Digest != "" {
		if err := plugin.VerifyDigest(dir, entry.Digest); err != nil {
			return nil, fmt.Errorf("%w: %w: reinstall it ('fledge plugins update %s')", ErrContentChanged, err, entry.Name)
		}
	}
	return man, nil
}

// BinaryPath resolves a command binary inside the installed plugin dir; exec says it must be
// executable (a WASM module is data for the runtime).
func BinaryPath(dir, rel string, exec bool) (string, error) {
	p := filepath.Join(dir, rel)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBinary, rel, err)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if !policy.Within(real, realDir) {
		return "", fmt.Errorf("%w: %q resolves outside the plugin dir", ErrBinary, rel)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBinary, rel, err)
	}
	if !st.Mode().IsRegular() || (exec && st.Mode()&0o111 == 0) {
		return "", fmt.Errorf("%w: %q is not an executable file", ErrBinary, rel)
	}
	return real, nil
}

// Version is the fledge version told to plugins, servers and clients (set by cmd/fledge;
// the module version when empty).
var Version = ""

// FledgeVersion is Version, else the module's version, else "dev".
func FledgeVersion() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// PluginEnv are the FLEDGE_* variables a plugin process gets on top of the policy's
// minimal environment, the same for every protocol. Each points at something the plugin
// may actually reach:
//
//   - FLEDGE_PLUGIN_DIR: its installed dir, readable (read+execute) by the plugin, so
//     multi-file plugins find their helpers and data files as under the Rust fledge host,
//     which sets it for every plugin. Read-only here: state belongs in FLEDGE_DATA_DIR.
//   - FLEDGE_DATA_DIR: its private data dir, the one place it may write.
//   - FLEDGE_PLUGIN, FLEDGE_COMMAND, FLEDGE_VERSION: who it is, what it was run as, and
//     which fledge runs it.
//   - FLEDGE_NON_INTERACTIVE=1 when nobody can answer (--ni, a tool call, a server): the
//     variable the Rust fledge host reads for the same mode, so a plugin can skip questions.
//
// The dirs are the resolved paths policy grants (Paths), not the ones spelled through a
// symlink: with the config dir reached through one (~/.config in a dotfiles checkout), the
// link lives in $HOME, which the plugin never sees, so only the resolved path reaches the dir.
//
// Empty values are left out (a legacy plugin has no command name of its own).
func (b *Binding) PluginEnv(command string, nonInteractive bool) map[string]string {
	pluginDir, dataDir := b.Paths.PluginDir, b.Paths.PluginDataDir
	if pluginDir == "" {
		pluginDir = b.Dir
	}
	if dataDir == "" {
		dataDir = b.DataDir
	}
	vars := map[string]string{
		"FLEDGE_PLUGIN":     b.Entry.Name,
		"FLEDGE_COMMAND":    command,
		"FLEDGE_PLUGIN_DIR": pluginDir,
		"FLEDGE_DATA_DIR":   dataDir,
		"FLEDGE_VERSION":    FledgeVersion(),
	}
	if nonInteractive {
		vars["FLEDGE_NON_INTERACTIVE"] = "1"
	}
	for k, v := range vars {
		if v == "" {
			delete(vars, k)
		}
	}
	return vars
}

// StartDir is the one rule for where a plugin process starts, whatever its protocol
// (policy.PluginCwd): the user's working directory when the plugin may read it, else the
// project root when it may read the project, else its data dir. userCwd is "" where no user
// stands behind the call (a tool call, a server).
func (b *Binding) StartDir(userCwd string, a sandbox.Access) string {
	root := ""
	if b.Project != nil {
		root = b.Project.Root
	}
	if userCwd != "" {
		userCwd = Resolved(userCwd)
	}
	return policy.PluginCwd(userCwd, root, b.DataDir, a)
}

// resolvedReads are the read grants as the sandbox will open them: symlinks followed, so
// policy checks the path reached (a granted path later swapped for a link into a key
// store is dropped, not followed).
func resolvedReads(read []string) []string {
	if len(read) == 0 {
		return nil
	}
	out := make([]string, 0, len(read))
	for _, r := range read {
		out = append(out, Resolved(r))
	}
	return out
}
