package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/protocolhost"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/ui"
)

// env is everything a run needs that comes from the machine rather than from flags.
type env struct {
	configDir string
	stateDir  string
	auditPath string
	cfg       *policy.Config
	sb        sandbox.Sandbox
	log       *audit.Log
}

func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openEnv loads policy, the sandbox and the audit log. Commands that only read (list, info)
// do not need it.
func openEnv(g *Globals) (*env, error) {
	cd, err := g.configDir()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	cfg, err := policy.Load(cd)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "%v", err)
	}
	ap, err := audit.DefaultPath()
	if err != nil {
		return nil, exitErr(ExitCannotRun, "audit log: %v", err)
	}
	sb, err := platform.New(platform.Options{})
	if err != nil {
		return nil, exitErr(ExitCannotRun, "sandbox: %v", err)
	}
	return &env{configDir: cd, stateDir: stateDir(), auditPath: ap, cfg: cfg, sb: sb}, nil
}

func (e *env) openAudit() (*audit.Log, error) {
	if e.log != nil {
		return e.log, nil
	}
	l, err := audit.Open(e.auditPath, audit.Options{
		Fsync:       audit.FsyncPolicy(e.cfg.Audit.Fsync),
		RotateBytes: e.cfg.Audit.RotateBytes,
	})
	if err != nil {
		return nil, exitErr(ExitCannotRun, "audit log %s: %v", e.auditPath, err)
	}
	e.log = l
	return l, nil
}

func (e *env) close() {
	if c, ok := e.sb.(io.Closer); ok {
		// Finished runs' cgroups and temp dirs are removed in the background; wait for it.
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "fledge: warning: sandbox cleanup: %v\n", err)
		}
	}
	if e.log != nil {
		_ = e.log.Close()
	}
}

// paths is the policy view of where things are for one plugin.
func (e *env) paths(entryDir, dataDir string, proj *project.Info) policy.Paths {
	home, _ := os.UserHomeDir()
	// Policy is lexical; Landlock follows symlinks when it opens a rule's path. So every
	// path is resolved first: a PATH entry that is a symlink to $HOME must be judged as $HOME.
	var userPATH []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.IsAbs(d) {
			userPATH = append(userPATH, resolved(d))
		}
	}
	p := policy.Paths{
		PluginDir:        resolved(entryDir),
		PluginDataDir:    resolved(dataDir),
		ConfigDir:        resolved(e.configDir),
		StateDir:         resolved(e.stateDir),
		AuditLog:         resolved(e.auditPath),
		UserPATH:         userPATH,
		Home:             resolved(home),
		PluginDirEntries: dirEntries(entryDir),
	}
	if proj != nil {
		p.ProjectRoot = proj.Root
	}
	return p
}

// resolved is p with symlinks resolved as far as it exists (the missing tail kept).
func resolved(p string) string {
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
	return filepath.Join(resolved(filepath.Clean(parent)), base)
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

func runPlugin(ctx context.Context, g *Globals, command string, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	e, err := openEnv(g)
	if err != nil {
		return err
	}
	defer e.close()

	reg, err := plugin.LoadRegistry(e.configDir)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	entry, err := reg.FindCommand(command)
	if err != nil {
		if errors.Is(err, plugin.ErrUnknownCommand) {
			return exitErr(ExitUnknownCmd, "unknown command %q: no installed plugin provides it (see 'fledge plugins list')", command)
		}
		return exitErr(ExitCannotRun, "%v", err)
	}
	pluginDir := plugin.Dir(e.configDir, entry.Name)
	man, err := verifyInstalled(pluginDir, entry)
	if err != nil {
		return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	cmdSpec := man.Command(command)
	if cmdSpec == nil {
		return exitErr(ExitUnknownCmd, "plugin %s no longer declares command %q; reinstall it", entry.Name, command)
	}
	program, err := binaryPath(pluginDir, cmdSpec.Binary, !man.IsWasm())
	if err != nil {
		return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}

	cwd, _ := os.Getwd()
	proj, err := project.Detect(cwd, g.Project)
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	log, err := e.openAudit()
	if err != nil {
		return err
	}
	u := ui.New(ui.Options{In: g.Streams.In, Out: g.Streams.Out, Err: g.Streams.Err, NonInteractive: g.nonInteractive()})
	defer u.Close()

	dataDir := plugin.DataDir(e.configDir, entry.Name)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return exitErr(ExitCannotRun, "plugin data dir: %v", err)
	}
	paths := e.paths(pluginDir, dataDir, proj)
	sessionID := newSessionID()
	ref := &audit.PluginRef{Name: entry.Name, Version: entry.Version, Source: entry.Source, ManifestDigest: entry.ManifestSHA256}

	switch man.Plugin.Protocol {
	case "":
		return runLegacy(ctx, g, e, u, log, sessionID, ref, program, args, proj, paths)
	case protocol.Version:
	default:
		return exitErr(ExitCannotRun, "plugin %s speaks protocol %q, but this fledge only speaks %q: upgrade fledge", entry.Name, man.Plugin.Protocol, protocol.Version)
	}

	var store *plugin.Store
	if entry.Granted.Store {
		store, err = plugin.OpenStore(plugin.StatePath(e.configDir, entry.Name), plugin.DefaultStoreLimits)
		if err != nil {
			u.Warn(fmt.Sprintf("plugin storage unavailable: %v", err))
		} else {
			for _, w := range store.Warnings() {
				u.Warn(w)
			}
		}
	}

	grants := entry.Granted
	rep := e.sb.Report()
	warnDegraded(u, e, rep)

	execRoots := []string{}
	if proj != nil {
		execRoots = append(execRoots, proj.Root)
	}
	execRoots = append(execRoots, pluginDir)

	environ := os.Environ()
	pluginEnv := policy.ChildEnv(environ, e.cfg.Sandbox.EnvAllow, map[string]string{
		"FLEDGE_PLUGIN":   entry.Name,
		"FLEDGE_COMMAND":  command,
		"FLEDGE_DATA_DIR": dataDir,
		"FLEDGE_VERSION":  version,
	})
	execEnv := policy.ChildEnv(environ, e.cfg.Sandbox.EnvAllow, nil)

	// The plugin starts in the project when it may read it, else in its data dir.
	pluginCwd := dataDir
	if proj != nil && grants.FS() == policy.FilesystemProject {
		pluginCwd = proj.Root
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	stderr, flushStderr := pluginStderr(g.Streams.Err)
	defer flushStderr()

	var storeIface protocolhost.StateStore
	if store != nil {
		storeIface = store
	}
	opts := protocolhost.Options{
		SessionID:     sessionID,
		FledgeVersion: version,
		Plugin: protocolhost.PluginMeta{
			Name: entry.Name, Version: entry.Version, Dir: pluginDir, DataDir: dataDir,
			Source: entry.Source, ManifestDigest: entry.ManifestSHA256,
		},
		Command:     command,
		Program:     program,
		Args:        args,
		Grants:      toWire(grants),
		Project:     proj,
		InitProject: initProject(ctx, protocolhost.SandboxedGit(e.sb, policy.GitAccess(paths)), proj),
		GitAccess:   policy.GitAccess(paths),
		UI:          u,
		Sandbox:     e.sb,
		Audit:       log,
		Store:       storeIface,
		Stderr:      stderr,
		PluginSpec: sandbox.Spec{
			Env:     pluginEnv,
			Access:  policy.PluginAccess(paths, grants, e.cfg),
			Network: grants.Network && e.cfg.NetworkAllowed(),
			// Unix sockets follow policy; a plugin's network grant does not open them.
			UnixSockets: e.cfg.UnixSocketsAllowed(),
			Limits:      e.cfg.PluginLimits(),
			PrivateTmp:  true,
			Strict:      e.cfg.Sandbox.Strict,
		},
		PluginCwd: pluginCwd,
		ExecSpec: sandbox.Spec{
			Env:         execEnv,
			Access:      policy.ExecAccess(paths, e.cfg),
			Network:     e.cfg.NetworkAllowed(),
			UnixSockets: e.cfg.UnixSocketsAllowed(),
			Limits:      e.cfg.ExecLimits(),
			Strict:      e.cfg.Sandbox.Strict,
		},
		ExecRoots:   execRoots,
		MetadataEnv: policy.MetadataEnv(environ, e.cfg.Sandbox.EnvAllow),
		Limits: protocolhost.Limits{
			LineMax:            int(e.cfg.Limits.LineMax),
			ConcurrentExecs:    e.cfg.Limits.ConcurrentExecs,
			ExecQueue:          e.cfg.Limits.ExecQueue,
			PendingRequests:    e.cfg.Limits.PendingRequests,
			PromptTimeout:      e.cfg.Limits.PromptTimeout,
			ExecTimeoutDefault: e.cfg.Sandbox.TimeoutDefault,
			ExecTimeoutMax:     e.cfg.Sandbox.TimeoutMax,
			OutputCap:          int(e.cfg.Sandbox.OutputCap),
		},
		Signals: sigs,
	}
	if man.IsWasm() {
		w, err := wasmRuntime(e, grants, proj, dataDir, program, &opts)
		if err != nil {
			return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
		}
		defer w.Close()
	}
	out, err := protocolhost.Run(ctx, opts)
	if err != nil && out == nil {
		if errors.Is(err, protocolhost.ErrSandbox) {
			return exitErr(ExitCannotRun, "%v (reason: %s; strict policy in %s)", err, reason.SandboxUnavailable, e.cfg.File)
		}
		return exitErr(ExitCannotRun, "%v", err)
	}
	if err != nil {
		u.Warn(err.Error())
	}
	if out.Interrupted {
		return &ExitError{Code: ExitInterrupted}
	}
	if out.ExitCode != 0 {
		return &ExitError{Code: out.ExitCode}
	}
	return nil
}

func toWire(g policy.Grants) protocol.Capabilities {
	return protocol.Capabilities{Exec: g.Exec, Store: g.Store, Metadata: g.Metadata, Network: g.Network, Filesystem: g.FS()}
}

func initProject(ctx context.Context, git project.Runner, p *project.Info) *protocol.Project {
	if p == nil {
		return nil
	}
	out := &protocol.Project{Name: p.Name, Root: p.Root, Language: p.Language}
	if gi := project.ReadGitInfoWith(ctx, git, p.Root); gi != nil {
		out.Git = &protocol.GitInfo{
			Branch: gi.Branch, Dirty: gi.Dirty, Remote: gi.Remote,
			RemoteURL: policy.StripURLCredentials(gi.RemoteURL),
		}
	}
	return out
}

// warnDegraded says once per session what the sandbox cannot enforce here.
func warnDegraded(u ui.UI, e *env, rep sandbox.Report) {
	if len(rep.Warnings) == 0 && rep.Confinement != "none" {
		return
	}
	msg := "sandbox degraded: " + strings.Join(rep.Warnings, "; ")
	if rep.Confinement == "none" {
		msg = "no filesystem confinement on this system (confinement: none); " + strings.Join(rep.Warnings, "; ")
	}
	if e.cfg.Sandbox.Strict {
		return // strict refuses at start instead; the error says why
	}
	// The session records it (sandbox_degraded, with its session id and plugin).
	u.Warn(msg)
}

// verifyInstalled loads the installed manifest and checks it is the one the user approved:
// a manifest edited after install (by anyone) must be re-approved, not silently trusted.
func verifyInstalled(dir string, entry *plugin.Entry) (*plugin.Manifest, error) {
	man, _, err := plugin.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	if entry.ManifestSHA256 != "" && man.SHA256() != entry.ManifestSHA256 {
		return nil, fmt.Errorf("plugin.toml changed since it was approved (sha256 %s, approved %s): reinstall it to review the change", man.SHA256()[:12], entry.ManifestSHA256[:min(12, len(entry.ManifestSHA256))])
	}
	return man, nil
}

// binaryPath resolves a command binary inside the installed plugin dir; exec says it must be
// executable (a WASM module is data for the runtime).
func binaryPath(dir, rel string, exec bool) (string, error) {
	p := filepath.Join(dir, rel)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("command binary %q: %w", rel, err)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if !policy.Within(real, realDir) {
		return "", fmt.Errorf("command binary %q resolves outside the plugin dir", rel)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || (exec && st.Mode()&0o111 == 0) {
		return "", fmt.Errorf("command binary %q is not an executable file", rel)
	}
	return real, nil
}
