// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/ui/clip"
)

var (
	// ErrNeedsGrant: a non-interactive install of a plugin that declares capabilities, with
	// neither --yes nor --grant. Install never grants silently.
	ErrNeedsGrant = errors.New("capabilities need an explicit grant")
	// ErrAlreadyInstalled: a plugin by that name is installed from a different source.
	ErrAlreadyInstalled = errors.New("plugin already installed")
	// ErrCommandTaken: another installed plugin owns one of the commands.
	ErrCommandTaken = errors.New("command already provided by another plugin")
	// ErrBadSource: the source is not a plugin directory, a git URL or a package.
	ErrBadSource = errors.New("invalid plugin source")
	// ErrClone: git could not fetch the source.
	ErrClone = errors.New("git clone failed")
	// ErrHooks: hooks were requested but could not run, or one failed.
	ErrHooks = errors.New("install hook failed")
	// ErrUnapprovedChange: an update would give the plugin more than the user approved
	// before (a capability, a server argument or environment variable, another version or
	// entry point) and the user could not be asked: --yes and --ni grant nothing new.
	ErrUnapprovedChange = errors.New("the update needs your approval")
	// ErrNotDeclared: --grant names a capability the manifest does not declare. The same
	// sentinel as policy.ErrNotDeclared, re-exported so callers need only this package.
	ErrNotDeclared = policy.ErrNotDeclared
)

// DefaultCloneTimeout bounds a git clone.
const DefaultCloneTimeout = 2 * time.Minute

// Asker asks the user a yes/no question (a TTY prompt in the CLI).
type Asker interface {
	Confirm(question string, def bool) (bool, error)
}

// HookRunner runs one install hook with dir (the staged plugin copy) as its working dir. The
// CLI supplies one that goes through the sandbox with the exec profile; hooks are plugin code.
type HookRunner func(ctx context.Context, dir string, h Hook) error

// InstallOptions configure Install.
type InstallOptions struct {
	ConfigDir string
	Source    string // a directory, or a git URL (https, ssh, git, file, scp-like)
	// Yes grants everything the manifest declares.
	Yes bool
	// Grant (--grant) grants a subset of what the manifest declares; it wins over Yes.
	Grant *policy.Grants
	// NonInteractive: never ask; without Yes or Grant a plugin declaring capabilities is
	// refused with ErrNeedsGrant.
	NonInteractive bool
	// RunHooks runs [hooks] (sorted by name) through RunHook after they were shown.
	RunHooks bool
	RunHook  HookRunner
	Asker    Asker
	Out      io.Writer // human-readable progress; nil discards
	// CloneTimeout bounds a git clone (default DefaultCloneTimeout).
	CloneTimeout time.Duration
	// Now stamps the entry (default time.Now).
	Now func() time.Time
	// Handshake, when set, runs after the manifest is read and before grants are decided,
	// for protocols whose plugins describe themselves (jsonrpc-2.0): it gets the source dir
	// and the manifest, and returns bytes kept as HandshakeFile in the installed copy (nil:
	// nothing kept). An error refuses the install.
	Handshake func(ctx context.Context, dir string, m *Manifest) ([]byte, error)
	// RecordSource, when set, is the source recorded instead of the dir (a bare executable
	// fledge wrapped in a dir of its own records the executable's path).
	RecordSource string
	// HooksOffline runs the hooks with no network (Hook.Offline), or, with HooksNetworkTo,
	// with only those destinations (Hook.NetworkTo).
	HooksOffline   bool
	HooksNetworkTo []string
	// KeepGrants (plugins update) are the grants the plugin holds now; they are kept when
	// the new manifest asks for no more than PreviousAsked (what the user was asked for
	// before: the approved manifest's declarations, ApprovedAsked), else the grants are
	// decided again on a terminal or with Grant; Yes and NonInteractive then refuse
	// (ErrUnapprovedChange): an update never grants what the user did not decide on.
	KeepGrants    *policy.Grants
	PreviousAsked policy.Grants
	// NPM is how an npm plugin was asked for, recorded in its entry (Entry.NPM).
	NPM *NPMRequest
	// OCI is how an image plugin was asked for and what it was pinned to (Entry.OCI).
	OCI *OCIRecord
	// Unpack, when set, fills the staged copy after the grants were decided and the
	// source tree copied into it (an image's layers, into rootfs/; too large for the copy).
	Unpack func(ctx context.Context, stage string) error
	// Verify, when set, checks the installed plugin once it is in place and in plugins.toml
	// (an npm package's server must complete the MCP handshake), while the copy it replaces
	// is still kept aside. An error rolls the install back: the previous copy and entry (or
	// none) are restored, and Install returns the error.
	Verify func(ctx context.Context, e *Entry) error
	// PyPI is how a PyPI plugin was asked for, recorded in its entry (Entry.PyPI).
	PyPI *PyPIRequest
	// RecordDigest records the content digest of the staged copy, after its hooks, in the
	// entry (Entry.Digest). ExpectDigest, when set, refuses a copy with any other digest
	// (ErrDigestMismatch) before anything is replaced: a sync from fledge.lock.
	RecordDigest bool
	ExpectDigest string
	// Managed is the machine's managed policy: grants over its ceiling refuse the install
	// (policy.CeilingError), whatever --grant, --yes or an answer said.
	Managed *policy.Managed
}

// Install copies a plugin into <config>/plugins/<name>/, decides its grants, and records it
// in plugins.toml. Re-installing a name from the same source replaces the code, asks for
// grants again (the new manifest may declare different ones) and keeps state.json and data/;
// the same name from another source is ErrAlreadyInstalled (remove it first).
func Install(ctx context.Context, o InstallOptions) (*Entry, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if o.ConfigDir == "" {
		return nil, errors.New("install: no config dir")
	}
	srcDir, source, cleanup, err := fetchSource(ctx, o)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if o.RecordSource != "" {
		source = o.RecordSource
	}

	m, warnings, err := readManifest(srcDir)
	for _, w := range warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	if err != nil {
		return nil, err
	}
	name := m.Plugin.Name

	// Checked now to fail before asking anything, and again under the lock before the swap.
	if _, _, err := checkConflicts(o.ConfigDir, m, source); err != nil {
		return nil, err
	}

	var handshake []byte
	if o.Handshake != nil {
		if handshake, err = o.Handshake(ctx, srcDir, m); err != nil {
			return nil, err
		}
	}

	var granted policy.Grants
	switch {
	case o.KeepGrants != nil && m.Asked().Subset(o.PreviousAsked):
		granted = *o.KeepGrants
		fmt.Fprintf(out, "Plugin %s asks for no more than before; keeping its grants: %s\n", name, granted.String())
	case o.KeepGrants != nil && o.Grant == nil && (o.Yes || o.NonInteractive || o.Asker == nil):
		return nil, fmt.Errorf("%w: plugin %s now asks for %s, beyond what you decided on before; an update with --yes or without a terminal grants nothing new: run `fledge plugins update %s` on a terminal to decide, or name what to grant with --grant",
			ErrUnapprovedChange, name, strings.Join(m.Asked().Missing(o.PreviousAsked), ", "), name)
	default:
		if o.KeepGrants != nil {
			fmt.Fprintf(out, "Plugin %s now asks for more (%s); its grants are decided again.\n", name,
				strings.Join(m.Asked().Missing(o.PreviousAsked), ", "))
		}
		if granted, err = decideGrants(o, m, out); err != nil {
			return nil, err
		}
	}

	if err := o.Managed.CheckPlugin(name, !m.HoldsGrants(), granted, nil); err != nil {
		return nil, err
	}

	hooks := m.HookList()
	if len(hooks) > 0 {
		state := "will NOT run (install with hooks enabled to run them)"
		if o.RunHooks {
			state = "will run now, confined"
		}
		fmt.Fprintf(out, "Plugin %s declares install hooks; they %s:\n", name, state)
		for _, h := range hooks {
			fmt.Fprintf(out, "  %s: %s\n", h.Name, h.Command)
		}
	}

	pluginsDir := filepath.Join(o.ConfigDir, "plugins")
	if err := os.MkdirAll(pluginsDir, 0o700); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(pluginsDir, ".install-"+name+"-")
	if err != nil {
		return nil, err
	}
	staged := false
	defer func() {
		if !staged {
			os.RemoveAll(stage)
		}
	}()
	if err := os.Chmod(stage, 0o755); err != nil {
		return nil, err
	}
	skipped, err := copyTree(srcDir, stage)
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		if s != ".git" {
			fmt.Fprintf(out, "warning: %s in the source is host-owned; not copied\n", s)
		}
	}
	if o.Unpack != nil {
		if err := o.Unpack(ctx, stage); err != nil {
			return nil, err
		}
	}
	if o.RunHooks && len(hooks) > 0 {
		if o.RunHook == nil {
			return nil, fmt.Errorf("%w: no hook runner configured", ErrHooks)
		}
		for _, h := range hooks {
			h.Offline, h.NetworkTo = o.HooksOffline, o.HooksNetworkTo
			if err := o.RunHook(ctx, stage, h); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrHooks, h.Name, err)
			}
		}
	}
	// The recorded handshake goes in after the hooks, which can write anything in the
	// staged dir: what every later start is compared with is what the plugin said at
	// install, never what a hook wrote in its place.
	if err := os.RemoveAll(filepath.Join(stage, HandshakeFile)); err != nil {
		return nil, err
	}
	if handshake != nil {
		if err := os.WriteFile(filepath.Join(stage, HandshakeFile), handshake, 0o644); err != nil {
			return nil, err
		}
	}
	// Full validation on the copy: binaries exist inside it (after hooks built them), and the
	// manifest is byte-for-byte the one the user approved.
	m2, _, err := LoadManifest(stage)
	if err != nil {
		if len(hooks) > 0 && !o.RunHooks {
			err = fmt.Errorf("%w (the plugin has install hooks that may build it; they were not run)", err)
		}
		return nil, err
	}
	if m2.SHA256() != m.SHA256() {
		return nil, fmt.Errorf("%w: plugin.toml changed during install", ErrInvalidManifest)
	}
	digest := ""
	if o.RecordDigest || o.ExpectDigest != "" {
		if digest, err = TreeDigest(stage); err != nil {
			return nil, err
		}
		if o.ExpectDigest != "" && digest != o.ExpectDigest {
			return nil, fmt.Errorf("%w: %s hashes to %s, fledge.lock pins %s", ErrDigestMismatch, name, short(digest), short(o.ExpectDigest))
		}
		if o.PyPI != nil && o.PyPI.Wheels == nil {
			// Built from its sdist by the hook: what it built is recorded, unpinned.
			rec := *o.PyPI
			rec.Wheels = BuiltWheels(stage)
			o.PyPI = &rec
		}
	}
	if err := os.Mkdir(filepath.Join(stage, "data"), 0o700); err != nil {
		return nil, err
	}

	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	entry := Entry{
		Name: name, Source: source, Version: m.Plugin.Version, Installed: now().UTC().Truncate(time.Second),
		Commands: m.CommandNames(), Granted: granted, ManifestSHA256: m.SHA256(), Protocol: m.Plugin.Protocol,
		NPM: o.NPM, PyPI: o.PyPI, OCI: o.OCI, Digest: digest,
	}
	unlock, err := lockRegistry(o.ConfigDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	reg, existing, err := checkConflicts(o.ConfigDir, m, source)
	if err != nil {
		return nil, err
	}
	var previous *Entry // reg.Put overwrites the entry existing points at
	if existing != nil {
		p := *existing
		previous = &p
		entry.Tools = existing.Tools // the user's tool rules outlive a new copy of the code
	}
	final := Dir(o.ConfigDir, name)
	commit, undo, err := swapIn(stage, final, existing != nil)
	if err != nil {
		return nil, err
	}
	staged = true
	reg.Put(entry)
	if err := reg.Save(); err != nil {
		undo()
		return nil, fmt.Errorf("save registry: %w", err)
	}
	if o.Verify != nil {
		if err := o.Verify(ctx, &entry); err != nil {
			return nil, rollBack(reg, name, previous, undo, err)
		}
	}
	commit()
	// The one "installed" line is the caller's: it knows where results go (stdout).
	return &entry, nil
}

// rollBack undoes an install whose Verify failed: the entry it replaced (or none) goes back
// into plugins.toml, and the copy it replaced (or nothing) back into place. why is returned,
// with what could not be restored, if anything.
func rollBack(reg *Registry, name string, previous *Entry, undo func(), why error) error {
	if previous != nil {
		reg.Put(*previous)
	} else {
		reg.Delete(name)
	}
	err := reg.Save()
	undo()
	if err != nil {
		return fmt.Errorf("%w; and plugins.toml could not be restored: %v", why, err)
	}
	return why
}

// checkConflicts loads the registry and refuses a name installed from another source or a
// command another plugin owns. It returns the registry and the entry being replaced, if any.
func checkConflicts(configDir string, m *Manifest, source string) (*Registry, *Entry, error) {
	reg, err := LoadRegistry(configDir)
	if err != nil {
		return nil, nil, err
	}
	name := m.Plugin.Name
	existing := reg.Find(name)
	if existing != nil && existing.Source != source {
		return nil, nil, fmt.Errorf("%w: %q is installed from %s; run `fledge plugins remove %s` first", ErrAlreadyInstalled, name, existing.Source, name)
	}
	for _, c := range m.Commands {
		if owner, err := reg.FindCommand(c.Name); err == nil && owner.Name != name {
			return nil, nil, fmt.Errorf("%w: command %q belongs to plugin %q", ErrCommandTaken, c.Name, owner.Name)
		}
	}
	return reg, existing, nil
}

// swapIn moves stage to final. An existing final dir is moved aside first; with keepState its
// state.json and data/ move into the new copy. commit deletes the replaced copy; undo restores
// the previous state as far as possible (used when the registry cannot be saved).
func swapIn(stage, final string, keepState bool) (commit, undo func(), err error) {
	st, err := os.Lstat(final)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	if err == nil && !st.IsDir() {
		return nil, nil, fmt.Errorf("%s: %w", final, ErrUnsafeFile)
	}
	if err != nil { // fresh install
		if err := os.Rename(stage, final); err != nil {
			return nil, nil, err
		}
		return func() { _ = syncDir(filepath.Dir(final)) }, func() { os.RemoveAll(final) }, nil
	}
	old := filepath.Join(filepath.Dir(final), ".old-"+filepath.Base(final)+"-"+randHex())
	if err := os.Rename(final, old); err != nil {
		return nil, nil, err
	}
	moved := []string{}
	restore := func(from string) {
		for _, n := range moved {
			os.RemoveAll(filepath.Join(old, n))
			os.Rename(filepath.Join(from, n), filepath.Join(old, n))
		}
		os.Rename(old, final)
	}
	if keepState {
		for _, n := range []string{StateFile, "data"} {
			if _, err := os.Lstat(filepath.Join(old, n)); err != nil {
				continue
			}
			os.RemoveAll(filepath.Join(stage, n))
			if err := os.Rename(filepath.Join(old, n), filepath.Join(stage, n)); err != nil {
				restore(stage)
				return nil, nil, err
			}
			moved = append(moved, n)
		}
	}
	if err := os.Rename(stage, final); err != nil {
		restore(stage)
		return nil, nil, err
	}
	_ = syncDir(filepath.Dir(final))
	commit = func() { os.RemoveAll(old) } // failing to delete the old copy is not an install failure
	undo = func() {
		back := filepath.Join(filepath.Dir(final), ".undo-"+randHex())
		if os.Rename(final, back) == nil {
			restore(back)
			os.RemoveAll(back)
		}
	}
	return commit, undo, nil
}

func randHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// decideGrants applies --grant / --yes / interactive questions / refusal, in that order. A
// fledge-v1 plugin whose manifest does not mention filesystem is offered the default level
// (policy.FilesystemDefault: the project, read-only, which plugins of the Rust fledge host
// expect). Install never grants silently: that level is listed with the declared ones, asked
// on a terminal like any other capability (default yes), and named on the Granting line
// under --yes, --grant and --ni.
func decideGrants(o InstallOptions, m *Manifest, out io.Writer) (policy.Grants, error) {
	// sampling and elicitation (MCP client capabilities) are no manifest's to declare: any
	// MCP plugin may be granted them, with --grant, alongside --yes or the other items.
	var client policy.Grants
	if o.Grant != nil {
		client = o.Grant.ClientCapabilities()
		if !client.Empty() {
			if !SpeaksMCP(m.Plugin.Protocol) {
				return policy.Grants{Filesystem: policy.FilesystemNone}, fmt.Errorf("%w: %s (plugin %s speaks %s)", policy.ErrClientCapability, client.String(), m.Plugin.Name, orDefault(m.Plugin.Protocol))
			}
			rest := o.Grant.WithoutClientCapabilities()
			if o.Yes && rest.Empty() {
				o.Grant = nil // --yes --grant sampling: everything declared, and sampling
			} else {
				o.Grant = &rest
			}
		}
	}
	g, err := decideSandboxGrants(o, m, out)
	if err != nil || client.Empty() {
		return g, err
	}
	g = g.Union(client)
	fmt.Fprintf(out, "Granting the MCP client capabilities: %s\n", client.String())
	return g, nil
}

func orDefault(protocol string) string {
	if protocol == "" {
		return "no protocol"
	}
	return protocol
}

// decideSandboxGrants decides every capability but the MCP client ones.
func decideSandboxGrants(o InstallOptions, m *Manifest, out io.Writer) (policy.Grants, error) {
	declared, asked := m.Declared(), m.Asked()
	none := policy.Grants{Filesystem: policy.FilesystemNone}
	defaulted := m.FilesystemDefaulted()
	defaultItem := "filesystem=" + policy.FilesystemDefault
	withDefault := func(g policy.Grants) policy.Grants {
		if defaulted && g.FS() == policy.FilesystemNone {
			g.Filesystem = policy.FilesystemDefault
		}
		return g
	}
	// granting names what is granted, and says which level is the default rule.
	granting := func(prefix string, g policy.Grants) {
		note := ""
		if defaulted && g.FS() == policy.FilesystemDefault {
			note = fmt.Sprintf(" (%s by default)", defaultItem)
		}
		fmt.Fprintf(out, "%s: %s%s\n", prefix, g.String(), note)
	}
	defaultLine := func() {
		if defaulted {
			fmt.Fprintf(out, "  %-20s %s\n", defaultItem, policy.DescribeDefaultFilesystem)
		}
	}
	if declared.Empty() {
		if o.Grant != nil && !o.Grant.Empty() {
			g, err := o.Grant.Resolve(asked)
			if err != nil {
				return none, err
			}
			none = g // only a filesystem level at most the default can get here
		}
		fmt.Fprintf(out, "Plugin %s declares no capabilities.\n", m.Plugin.Name)
		if !defaulted {
			return none, nil
		}
		fmt.Fprintf(out, "By default it gets:\n")
		defaultLine()
		if o.Grant == nil && !o.Yes && !o.NonInteractive && o.Asker != nil {
			return askDefault(o, m, none, out, granting)
		}
		g := withDefault(none)
		granting("Granting", g)
		return g, nil
	}
	fmt.Fprintf(out, "Plugin %s declares these capabilities:\n", m.Plugin.Name)
	for _, n := range declared.Names() {
		fmt.Fprintf(out, "  %-20s %s\n", n, policy.Describe(n))
	}
	defaultLine()
	switch {
	case o.Grant != nil:
		g, err := o.Grant.Resolve(asked)
		if err != nil {
			return none, err
		}
		g = withDefault(g)
		granting("Granting", g)
		return g, nil
	case o.Yes:
		granting("Granting all declared", asked)
		return asked, nil
	case o.NonInteractive || o.Asker == nil:
		return none, needsGrant(m.Plugin.Name, declared)
	}
	g := none
	for _, n := range declared.Names() {
		ok, err := o.Asker.Confirm(fmt.Sprintf("Grant %s to %s (%s)?", n, m.Plugin.Name, policy.Describe(n)), false)
		if err != nil {
			return none, fmt.Errorf("install cancelled: %w", err)
		}
		if !ok {
			continue
		}
		switch {
		case n == "exec":
			g.Exec = true
		case n == "store":
			g.Store = true
		case n == "metadata":
			g.Metadata = true
		case n == "network":
			g.Network = true
		case strings.HasPrefix(n, "secret="): // one question per secret
			g.Secrets = append(g.Secrets, strings.TrimPrefix(n, "secret="))
		case strings.HasPrefix(n, "network="): // one question per destination
			g.NetworkTo = append(g.NetworkTo, strings.TrimPrefix(n, "network="))
		case strings.HasPrefix(n, "filesystem="):
			g.Filesystem = declared.Filesystem
		}
	}
	if defaulted {
		return askDefault(o, m, g, out, granting)
	}
	granting("Granting", g)
	return g, nil
}

// needsGrant is the refusal of an install that would have to ask for the capabilities a
// plugin declares, with nobody to ask and neither --yes nor --grant.
func needsGrant(name string, declared policy.Grants) error {
	return fmt.Errorf("%w: plugin %q declares %s; in non-interactive mode pass --yes to grant them all or --grant %s (or a subset)",
		ErrNeedsGrant, name, strings.Join(declared.Names(), ", "), strings.Join(declared.Names(), ","))
}

// grantsDecidable refuses at once, for a plugin whose declarations are known before it is
// fetched, what decideGrants would refuse once it is: a --grant beyond them, or nobody to
// ask (no terminal, neither --yes nor --grant) when there is something to ask. Only for
// manifests without the default filesystem rule (declared is then all they ask for).
func grantsDecidable(o InstallOptions, name string, declared policy.Grants) error {
	switch {
	case o.Grant != nil:
		_, err := o.Grant.Resolve(declared)
		return err
	case declared.Empty() || o.Yes:
		return nil
	case o.NonInteractive || o.Asker == nil:
		return needsGrant(name, declared)
	}
	return nil
}

// askDefault asks, on a terminal, for the default filesystem level on top of g (default
// yes: the plugins of the Rust fledge host read the project from their own process).
func askDefault(o InstallOptions, m *Manifest, g policy.Grants, out io.Writer, granting func(string, policy.Grants)) (policy.Grants, error) {
	item := "filesystem=" + policy.FilesystemDefault
	ok, err := o.Asker.Confirm(fmt.Sprintf("Grant %s to %s (%s)?", item, m.Plugin.Name, policy.DescribeDefaultFilesystem), true)
	if err != nil {
		return policy.Grants{Filesystem: policy.FilesystemNone}, fmt.Errorf("install cancelled: %w", err)
	}
	if ok {
		g.Filesystem = policy.FilesystemDefault
	} else {
		g.Filesystem = policy.FilesystemNone
	}
	granting("Granting", g)
	return g, nil
}

// readManifest parses <dir>/plugin.toml for shape only (binaries are checked on the copy).
func readManifest(dir string) (*Manifest, []string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadSource, err)
	}
	defer root.Close()
	f, err := root.Open(ManifestFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %s %s", ErrInvalidManifest, dir, ManifestFile, fsProblem(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, nil, err
	}
	return ParseManifest(data)
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var scpLike = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/]`) })

// IsGitURL reports whether a source names a git remote rather than a local directory.
func IsGitURL(s string) bool {
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http", "https", "git", "ssh", "file", "git+ssh", "ssh+git":
			return true
		}
		return false
	}
	return scpLike().MatchString(s)
}

// fetchSource returns a local dir holding the plugin, the source as recorded (credentials
// stripped; an absolute path for dirs) and a cleanup func.
func fetchSource(ctx context.Context, o InstallOptions) (dir, source string, cleanup func(), err error) {
	nop := func() {}
	s := o.Source
	switch {
	case s == "" || strings.HasPrefix(s, "-") || strings.ContainsRune(s, 0):
		return "", "", nop, fmt.Errorf("%w: %q", ErrBadSource, clip.Bytes(s, 80))
	case IsGitURL(s):
		tmp, err := os.MkdirTemp("", "fledge-clone-")
		if err != nil {
			return "", "", nop, err
		}
		cleanup = func() { os.RemoveAll(tmp) }
		repo := filepath.Join(tmp, "repo")
		if err := gitClone(ctx, s, repo, o.CloneTimeout); err != nil {
			cleanup()
			return "", "", nop, err
		}
		return repo, policy.StripURLCredentials(s), cleanup, nil
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return "", "", nop, err
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", "", nop, fmt.Errorf("%w: no such directory: %s (a source is a plugin directory, a git URL such as https://, ssh://, git@host:path or file://, or npm:PKG)", ErrBadSource, clip.Bytes(s, 80))
	case err != nil:
		return "", "", nop, fmt.Errorf("%w: %s: %v", ErrBadSource, clip.Bytes(s, 80), fsProblem(err))
	case !st.IsDir():
		return "", "", nop, fmt.Errorf("%w: %s is a file, not a plugin directory (a bare executable installs with --protocol; a plugin directory holds plugin.toml)", ErrBadSource, clip.Bytes(s, 80))
	}
	return abs, abs, nop, nil
}

// gitClone makes a shallow clone with hooks, submodules, prompts and every transport but
// https/http/ssh/git/file disabled, bounded by a timeout. git's output is kept (bounded) for the error message.
func gitClone(ctx context.Context, url, dst string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultCloneTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git",
		"-c", "core.hooksPath=/dev/null",
		// Only the transports IsGitURL accepts; ext:: and friends can run commands.
		"-c", "protocol.allow=never",
		"-c", "protocol.https.allow=always", "-c", "protocol.http.allow=always",
		"-c", "protocol.ssh.allow=always", "-c", "protocol.git.allow=always",
		"-c", "protocol.file.allow=always",
		"-c", "core.fsmonitor=false",
		"-c", "submodule.recurse=false",
		"clone", "--depth", "1", "--no-recurse-submodules", "--quiet", "--", url, dst)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GCM_INTERACTIVE=never")
	cmd.Stdin = nil
	var buf limitedBuffer
	buf.max = 16 << 10
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(buf.String())
		if ctx.Err() == context.DeadlineExceeded {
			msg = fmt.Sprintf("timed out after %s", timeout)
		}
		return fmt.Errorf("%w: %s: %v: %s", ErrClone, policy.StripURLCredentials(url), err, scrubOutput(msg))
	}
	return nil
}

// scrubOutput removes credentials git may echo back in its messages.
func scrubOutput(s string) string {
	fields := strings.Fields(s)
	for i, f := range fields {
		if strings.Contains(f, "://") || strings.Contains(f, "@") {
			fields[i] = policy.StripURLCredentials(strings.Trim(f, "'\"`"))
		}
	}
	return strings.Join(fields, " ")
}

// limitedBuffer keeps the first max bytes written and silently drops the rest.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// Remove uninstalls name: the registry entry first (so a crash never leaves an entry pointing
// at nothing), then the plugin dir, state.json and data included.
func Remove(configDir, name string) (*Entry, error) {
	reg, e, unlock, err := lockedEntry(configDir, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	removed := *e
	reg.Delete(name)
	if err := reg.Save(); err != nil {
		return nil, err
	}
	dir := Dir(configDir, name)
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &removed, nil
	case err != nil:
		return &removed, err
	case !st.IsDir(): // never follow a link planted here
		return &removed, os.Remove(dir)
	}
	trash := filepath.Join(configDir, "plugins", ".remove-"+name+"-"+randHex())
	if err := os.Rename(dir, trash); err != nil {
		return &removed, err
	}
	return &removed, os.RemoveAll(trash)
}

// List returns the installed plugins, sorted by name.
func List(configDir string) ([]Entry, error) {
	reg, err := LoadRegistry(configDir)
	if err != nil {
		return nil, err
	}
	out := append([]Entry(nil), reg.Plugins...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Name < out[j-1].Name; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// Info is what `plugins info` shows about one plugin.
type Info struct {
	Entry    Entry     `json:"entry"`
	Dir      string    `json:"dir"`
	DataDir  string    `json:"data_dir"`
	Manifest *Manifest `json:"-"`
	// Declared is what the live manifest declares (informational; only Entry.Granted counts).
	Declared *policy.Grants `json:"declared,omitempty"`
	// ManifestChanged: the live plugin.toml differs from the approved one.
	ManifestChanged bool     `json:"manifest_changed"`
	Warnings        []string `json:"warnings,omitempty"`
}

// GetInfo loads the registry entry and the live manifest of name.
func GetInfo(configDir, name string) (*Info, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: %q", ErrNotInstalled, clip.Bytes(name, 80))
	}
	reg, err := LoadRegistry(configDir)
	if err != nil {
		return nil, err
	}
	e := reg.Find(name)
	if e == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotInstalled, name)
	}
	info := &Info{Entry: *e, Dir: Dir(configDir, name), DataDir: DataDir(configDir, name)}
	m, warnings, err := LoadManifest(info.Dir)
	info.Warnings = warnings
	if err != nil {
		info.Warnings = append(info.Warnings, err.Error())
		info.ManifestChanged = true
		return info, nil
	}
	d := m.Declared()
	info.Manifest, info.Declared = m, &d
	info.ManifestChanged = m.SHA256() != e.ManifestSHA256
	return info, nil
}
