// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// ErrLockRefused: `plugins lock` or `plugins sync` refused a plugin (its content changed
// since install, tool definitions held back, a digest or grant that does not match).
var ErrLockRefused = errors.New("refused")

// LockResult is what one `plugins lock` wrote.
type LockResult struct {
	Path    string
	Plugins []plugin.LockEntry
}

// projectDir is the project whose fledge.lock a lock or sync is about.
func (h *Host) projectDir() (string, error) {
	proj, err := h.project()
	if err != nil {
		return "", err
	}
	if proj == nil || proj.Root == "" {
		return "", exitErr(ExitUsage, "no project here (a dir with .git or fledge.toml, or --project DIR): fledge.lock lives in the project")
	}
	return proj.Root, nil
}

// Lock writes the project's fledge.lock: every installed plugin's source, exact version,
// content digest, grants and approved tool pins. A plugin whose manifest or content changed
// since it was approved, or whose tool definitions are held back for review, is refused:
// the lock pins only what the user approved.
func (h *Host) Lock() (*LockResult, error) {
	e := h.Env
	root, err := h.projectDir()
	if err != nil {
		return nil, err
	}
	reg, err := h.registry()
	if err != nil {
		return nil, err
	}
	l := &plugin.Lock{}
	var refused []string
	for i := range reg.Plugins {
		en := &reg.Plugins[i]
		le, err := lockEntry(e.ConfigDir, en)
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", en.Name, err))
			continue
		}
		l.Plugins = append(l.Plugins, *le)
		var env []string
		if le.NPM != nil {
			env = le.NPM.Env
		}
		if le.PyPI != nil {
			env = le.PyPI.Env
		}
		if len(env) > 0 {
			_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: note: fledge.lock holds the server environment of %s (--env); a token belongs in a secret (--secret), not in a file you commit", en.Name))
		}
	}
	if len(refused) > 0 {
		return nil, exitErr(ExitCannotRun, "lock %v (nothing written):\n  %s", ErrLockRefused, strings.Join(refused, "\n  "))
	}
	if err := plugin.WriteLock(root, l); err != nil {
		return nil, exitErr(ExitCannotRun, "write %s: %v", plugin.ProjectLockFile, err)
	}
	return &LockResult{Path: filepath.Join(root, plugin.ProjectLockFile), Plugins: l.Plugins}, nil
}

// lockEntry pins one installed plugin.
func lockEntry(configDir string, en *plugin.Entry) (*plugin.LockEntry, error) {
	dir := plugin.Dir(configDir, en.Name)
	if _, err := core.VerifyInstalled(dir, en); err != nil {
		return nil, err
	}
	d, err := plugin.TreeDigest(dir)
	if err != nil {
		return nil, err
	}
	if en.Digest != "" && d != en.Digest {
		return nil, fmt.Errorf("%w: its files changed since install; reinstall or update it", plugin.ErrDigestMismatch)
	}
	le := &plugin.LockEntry{Name: en.Name, Source: en.Source, Version: en.Version, Digest: d, Protocol: en.Protocol,
		Granted: en.Granted, Read: en.Read}
	pf, err := pins.Load(configDir, en.Name)
	if err != nil {
		return nil, err
	}
	if pf != nil {
		if len(pf.Pending) > 0 {
			return nil, fmt.Errorf("tool definitions changed and are held back: review them first ('fledge plugins review %s')", en.Name)
		}
		le.Tools = map[string]string{}
		for n, p := range pf.Tools {
			le.Tools[n] = p.Hash
		}
	}
	if en.NPM != nil {
		r := *en.NPM
		r.Version = en.Version
		le.NPM = &r
	}
	if en.PyPI != nil {
		r := *en.PyPI
		r.Version = en.Version
		le.PyPI = &r
	}
	if en.OCI != nil {
		r := *en.OCI
		le.OCI = &r
	}
	return le, nil
}

// SyncResult is what one `plugins sync` did.
type SyncResult struct {
	Installed, Unchanged []string
}

// Sync installs exactly what the project's fledge.lock says: each plugin from its source at
// its exact version, refused unless its content has the pinned digest (and a PyPI plugin's
// wheels the pinned sha256s), granted exactly the lock's grants (never a question), its
// tools pinned to the lock's definitions (a server listing others is refused). A plugin
// already installed with the pinned digest and grants is left as it is. Each plugin is
// installed or refused on its own; the status is the first refusal's.
func (h *Host) Sync(ctx context.Context) (*SyncResult, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	root, err := h.projectDir()
	if err != nil {
		return nil, err
	}
	l, err := plugin.ReadLock(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, exitErr(ExitUsage, "no %s in %s ('fledge plugins lock' writes it)", plugin.ProjectLockFile, root)
		}
		return nil, exitErr(ExitCannotRun, "%s: %v", plugin.ProjectLockFile, err)
	}
	log, err := h.auditLog()
	if err != nil {
		return nil, err
	}
	res := &SyncResult{}
	var failed []string
	var first error
	for i := range l.Plugins {
		le := &l.Plugins[i]
		done, err := h.syncOne(ctx, log, le, root)
		switch {
		case err != nil:
			printErr(h.stderr(), err)
			failed = append(failed, le.Name)
			if first == nil {
				first = err
			}
		case done:
			res.Installed = append(res.Installed, le.Name)
		default:
			res.Unchanged = append(res.Unchanged, le.Name)
		}
	}
	if first != nil {
		code := ExitFailure
		var ee *ExitError
		if errors.As(first, &ee) {
			code = ee.Code
		}
		return res, exitErr(code, "not synced: %s (each stays as it was)", strings.Join(failed, ", "))
	}
	return res, nil
}

func printErr(w interface{ Write([]byte) (int, error) }, err error) {
	_ = ui.HostLine(w, "fledge: "+err.Error())
}

// syncCeiling is where the managed policy's ceiling applies to a lock entry: grants beyond
// what the machine's managed policy allows are refused here, before anything is fetched.
// With no managed policy there is no ceiling. The lock's protocol only says the entry is
// legacy or not; the install checks again against the manifest it fetched (Managed).
func (h *Host) syncCeiling(le *plugin.LockEntry) error {
	m := h.Env.Config.Managed
	kind, name := sourceKind(le.Source)
	if err := m.AllowSource(kind, name); err != nil {
		return err
	}
	return m.CheckPlugin(le.Name, le.Protocol == "", le.Granted, le.Read)
}

// syncOne installs one lock entry, or leaves it when it is installed as pinned.
func (h *Host) syncOne(ctx context.Context, log *audit.Log, le *plugin.LockEntry, root string) (bool, error) {
	e := h.Env
	refuse := func(err error) (bool, error) {
		_ = e.NewRecorder(log, &audit.PluginRef{Name: le.Name, Version: le.Version, Source: le.Source}, nil).
			RecordNow(audit.EventInstall, audit.Deny, reason.Code(installReason(err)),
				map[string]any{"source": le.Source, "error": err.Error(), "sync": true})
		return false, exitErr(installExit(err), "sync %s: %v", le.Name, err)
	}
	if err := h.syncCeiling(le); err != nil {
		return refuse(err)
	}
	reg, err := h.registry()
	if err != nil {
		return false, err
	}
	if cur := reg.Find(le.Name); cur != nil {
		if cur.Source != le.Source {
			return refuse(fmt.Errorf("%w: %s is installed from %s, the lock says %s; remove it first", ErrLockRefused, le.Name, cur.Source, le.Source))
		}
		if plugin.VerifyDigest(plugin.Dir(e.ConfigDir, le.Name), le.Digest) == nil &&
			sameGrants(cur, le) && cur.Version == le.Version {
			return false, nil
		}
	}
	in := &installer{h: h, log: log, out: h.opts.Streams.Out, errOut: h.stderr(), sync: le}
	g := le.Granted
	base := plugin.InstallOptions{ConfigDir: e.ConfigDir, Source: le.Source, NonInteractive: true, Grant: &g,
		ExpectDigest: le.Digest, Out: h.stderr(), Managed: e.Config.Managed}
	base.RunHook = in.hookRunner()
	oldPins, _ := pins.Load(e.ConfigDir, le.Name)
	restorePins := func() {
		if oldPins != nil {
			_ = pins.Save(e.ConfigDir, oldPins)
		} else {
			_ = pins.Remove(e.ConfigDir, le.Name)
		}
	}
	if len(le.Tools) > 0 {
		pf := &pins.File{Plugin: le.Name, Tools: map[string]pins.Pin{}}
		for n, hash := range le.Tools {
			pf.Tools[n] = pins.Pin{Hash: hash}
		}
		if err := pins.Save(e.ConfigDir, pf); err != nil {
			return false, exitErr(ExitCannotRun, "sync %s: %v", le.Name, err)
		}
	}
	refused, ierr := in.syncInstall(ctx, base, le, root)
	if refused != nil {
		restorePins()
		return refuse(refused)
	}
	if ierr != nil {
		restorePins()
		return false, ierr
	}
	for _, p := range le.Read {
		if _, err := h.changeReadGrant(le.Name, p, false); err != nil {
			return false, err
		}
	}
	return true, nil
}

// syncInstall installs one lock entry from its source, pinned: refused is a lock entry that
// cannot be installed as written (recorded by the caller as a sync refusal), err the
// install's own failure.
func (in *installer) syncInstall(ctx context.Context, base plugin.InstallOptions, le *plugin.LockEntry, root string) (refused, err error) {
	switch {
	case strings.HasPrefix(le.Source, plugin.SourcePyPI):
		r := le.PyPI
		if r == nil {
			return fmt.Errorf("%w: no [plugin.pypi] record", plugin.ErrBadLock), nil
		}
		if r.Python != "" {
			// pip runs on it unconfined, and the lock comes with the repository.
			if err := plugin.TrustedPython(r.Python, root); err != nil {
				return err, nil
			}
		}
		_, pkg, _, _ := plugin.ParsePackageSource(le.Source)
		ir := &InstallRequest{Source: le.Source, Package: PackageRequest{Version: le.Version, Name: le.Name, Bin: r.Bin,
			Env: r.Env, Network: r.Network, Filesystem: r.Filesystem, ServerArgs: r.Args, Secrets: r.Secrets,
			Python: r.Python, AllowSdist: r.AllowSdist}}
		return nil, in.runPyPI(ctx, ir, base, nil, pkg, "")
	case strings.HasPrefix(le.Source, plugin.SourceNPM):
		r := le.NPM
		if r == nil {
			return fmt.Errorf("%w: no [plugin.npm] record", plugin.ErrBadLock), nil
		}
		ir := &InstallRequest{Source: le.Source, Package: PackageRequest{Version: le.Version, Name: le.Name, Bin: r.Bin,
			Env: r.Env, Network: r.Network, Filesystem: r.Filesystem, ServerArgs: r.Args, Secrets: r.Secrets}}
		return nil, in.runPackage(ctx, ir, base, nil, nil)
	case strings.HasPrefix(le.Source, plugin.SourceOCI) || strings.HasPrefix(le.Source, plugin.SourceOCIArchive):
		r := le.OCI
		if r == nil || r.Digest == "" {
			return fmt.Errorf("%w: no [plugin.oci] record with its digest", plugin.ErrBadLock), nil
		}
		// Fetched by the pinned manifest digest: a registry serving anything else under the
		// tag is refused (plugin.ErrDigestMismatch) before anything is unpacked.
		ir := &InstallRequest{Source: le.Source, Package: PackageRequest{Name: le.Name, Env: r.Env,
			Network: r.Network, Filesystem: r.Filesystem, ServerArgs: r.Args, Secrets: r.Secrets, Digest: r.Digest}}
		return nil, in.runImage(ctx, ir, base, nil, nil)
	case plugin.IsPackageSource(le.Source):
		return fmt.Errorf("%w: source %s cannot be synced", plugin.ErrBadLock, le.Source), nil
	default:
		var listed []tools.Tool
		base.Handshake = in.handshakeHook(nil)
		base.Verify = in.syncVerify(&listed)
		return nil, in.installOne(ctx, base)
	}
}

// sameGrants: the entry holds exactly the lock's grants (read grants included).
func sameGrants(en *plugin.Entry, le *plugin.LockEntry) bool {
	a, b := en.Granted.Names(), le.Granted.Names()
	slices.Sort(a)
	slices.Sort(b)
	r1, r2 := slices.Clone(en.Read), slices.Clone(le.Read)
	slices.Sort(r1)
	slices.Sort(r2)
	return slices.Equal(a, b) && slices.Equal(r1, r2)
}

// syncVerify is the check a plugin installed by sync passes before it is kept: exactly the
// lock's grants, and, when the lock pins tools, a listing with no definition other than the
// pinned ones. Otherwise the install is rolled back.
func (in *installer) syncVerify(listed *[]tools.Tool) func(context.Context, *plugin.Entry) error {
	le, e := in.sync, in.h.Env
	return func(ctx context.Context, en *plugin.Entry) error {
		a, b := en.Granted.Names(), le.Granted.Names()
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			return fmt.Errorf("%w: it would be granted %s, the lock says %s", ErrLockRefused, strings.Join(a, ","), strings.Join(b, ","))
		}
		if len(le.Tools) == 0 {
			return nil
		}
		list, err := in.pluginTools(ctx, en.Name)
		if err != nil {
			return fmt.Errorf("%w (%v)", ErrNotMCPServer, err)
		}
		*listed = list
		pf, err := pins.Load(e.ConfigDir, en.Name)
		if err != nil {
			return err
		}
		if pf != nil && len(pf.Pending) > 0 {
			var names []string
			for n := range pf.Pending {
				names = append(names, n)
			}
			slices.Sort(names)
			return fmt.Errorf("%w: its tool definitions differ from the lock's (%s)", ErrLockRefused, strings.Join(names, ", "))
		}
		return nil
	}
}
