// SPDX-License-Identifier: MIT

package mcp

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// fixture is one fledge installation in a temp dir: a fake HOME (with a private key in
// ~/.ssh that no plugin may read), config and audit log under it, a project, and the
// real sandbox.
type fixture struct {
	t         *testing.T
	base      string
	home      string
	configDir string
	auditPath string
	project   string
	env       *core.Env
	stderr    *testutil.SyncBuffer
}

const fakeKey = "-----BEGIN FAKE PRIVATE KEY----- fledge-test-secret"

func newFixture(t *testing.T, mutate func(*policy.Config)) *fixture {
	t.Helper()
	sb, err := platform.New(platform.Options{})
	require.NoError(t, err)
	rep := sb.Report()
	testutil.SkipUnlessSupported(t, rep.Confinement == "landlock" && len(rep.Warnings) == 0,
		fmt.Sprintf("needs full Landlock confinement (have %q, missing %v)", rep.Confinement, rep.Warnings))

	base := core.Resolved(t.TempDir())
	f := &fixture{t: t, base: base, home: filepath.Join(base, "home"), project: filepath.Join(base, "project"), stderr: &testutil.SyncBuffer{}}
	require.NoError(t, os.MkdirAll(filepath.Join(f.home, ".ssh"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(f.home, ".ssh", "id_rsa"), []byte(fakeKey+"\n"), 0o600))
	require.NoError(t, os.MkdirAll(f.project, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.project, "README.md"), []byte("hello from the project\n"), 0o644))
	t.Setenv("HOME", f.home)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	// System dirs only: a version-manager shim under the real HOME is not reachable in the
	// sandbox.
	t.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
	f.configDir = filepath.Join(f.home, ".config", "fledge")
	stateDir := filepath.Join(f.home, ".local", "state", "fledge")
	f.auditPath = filepath.Join(stateDir, "audit.jsonl")
	require.NoError(t, os.MkdirAll(f.configDir, 0o700))
	require.NoError(t, os.MkdirAll(stateDir, 0o700))
	cfg := policy.Default()
	if mutate != nil {
		mutate(cfg)
	}
	f.env = &core.Env{ConfigDir: f.configDir, StateDir: stateDir, AuditPath: f.auditPath, Config: cfg, Sandbox: sb}
	t.Cleanup(func() { _ = f.env.Close() })
	return f
}

// install installs the plugin at dir with everything it declares granted.
func (f *fixture) install(dir string) {
	f.t.Helper()
	_, err := plugin.Install(context.Background(), plugin.InstallOptions{ConfigDir: f.configDir, Source: dir, Yes: true, NonInteractive: true})
	require.NoError(f.t, err)
}

// pluginLog is what plugin name's servers wrote on stderr (its log in the state dir).
func (f *fixture) pluginLog(name string) string {
	f.t.Helper()
	cur, _, err := f.env.PluginLogPaths(name)
	require.NoError(f.t, err)
	b, _ := os.ReadFile(cur)
	return string(b)
}

func (f *fixture) catalogue() *tools.Catalogue {
	f.t.Helper()
	reg, err := plugin.LoadRegistry(f.configDir)
	require.NoError(f.t, err)
	cat := tools.NewCatalogue(&tools.Host{Env: f.env, Project: &project.Info{Name: "project", Root: f.project}, Stderr: f.stderr}, reg)
	f.t.Cleanup(func() { _ = cat.Close() })
	return cat
}

// records are the audit records of one event, in order.
func (f *fixture) records(event string) []*audit.Record {
	f.t.Helper()
	var out []*audit.Record
	require.NoError(f.t, audit.Read(f.auditPath, func(r *audit.Record) error {
		if r.Event == event {
			out = append(out, r)
		}
		return nil
	}))
	return out
}

// mcpPlugin writes an MCP plugin dir: plugin.toml and bin/server, a shell wrapper that
// execs node on script (relative to the plugin dir) with args.
func (f *fixture) mcpPlugin(name, filesystem, script string, args ...string) string {
	f.t.Helper()
	dir := filepath.Join(f.base, "src-"+name)
	require.NoError(f.t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	caps := ""
	if filesystem != "" {
		caps = fmt.Sprintf("\n[capabilities]\nfilesystem = %q\n", filesystem)
	}
	manifest := fmt.Sprintf(`[plugin]
name = %q
version = "0.1.0"
description = "an MCP server"
protocol = "mcp"

[[commands]]
name = %q
description = "the MCP server"
binary = "bin/server"
%s`, name, name+"-server", caps)
	require.NoError(f.t, os.WriteFile(filepath.Join(dir, "plugin.toml"), []byte(manifest), 0o644))
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %s \"$(dirname \"$0\")/../%s\" %s\n", shellQuote(nodePath(f.t)), script, strings.Join(quoted, " "))
	require.NoError(f.t, os.WriteFile(filepath.Join(dir, "bin", "server"), []byte(wrapper), 0o755))
	return dir
}

func shellQuote(s string) string {
	if strings.HasPrefix(s, "$") {
		return `"` + s + `"` // a variable the wrapper expands
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, data, mode))
}

// nodePath is node outside any home dir (the sandbox does not let plugins into $HOME).
// Missing node is a skip, or a failure under FLEDGE_REQUIRE_SANDBOX=1.
func nodePath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/node", "/usr/local/bin/node", "/bin/node"} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	testutil.SkipUnlessSupported(t, false, "node is not installed in /usr/bin or /usr/local/bin (.ci/run installs it)")
	return ""
}

var npmMu sync.Mutex

// The official packages, pinned so a test run is reproducible.
const (
	pkgFilesystem = "@modelcontextprotocol/server-filesystem@2026.8.31"
	pkgEverything = "@modelcontextprotocol/server-everything@2026.8.31"
	pkgSDK        = "@modelcontextprotocol/sdk@1.32.2"
)

var offlineRe = regexp.MustCompile(`ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network|offline|ENOTCACHED`)

// npmInstall installs pkg into its own prefix under npmRoot (once; later runs reuse it,
// and npm's cache makes a fresh install work offline) and returns the prefix. It skips
// only when npm cannot reach the registry, and says so.
func npmInstall(t *testing.T, pkg string) string {
	t.Helper()
	nodePath(t)
	npm, err := exec.LookPath("npm")
	if err != nil {
		for _, p := range []string{"/usr/bin/npm", "/usr/local/bin/npm"} {
			if _, serr := os.Stat(p); serr == nil {
				npm, err = p, nil
			}
		}
	}
	if err != nil {
		testutil.SkipUnlessSupported(t, false, "npm is not installed (.ci/run installs it)")
	}
	npmMu.Lock()
	defer npmMu.Unlock()
	at := strings.LastIndex(pkg, "@")
	name := pkg[:at]
	prefix := filepath.Join(npmRoot, strings.NewReplacer("@", "", "/", "_").Replace(pkg))
	// Several test binaries (go test runs packages in parallel, and more than one checkout
	// may test on one machine) share npmRoot: an flock serialises them, and a prefix counts
	// only once its completion marker is there. npm installs into a staging dir that is
	// renamed into place, so a killed or concurrent install never leaves a half-filled
	// prefix that a later run would take for complete (a missing zod did exactly that).
	require.NoError(t, os.MkdirAll(npmRoot, 0o755))
	lock, err := os.OpenFile(prefix+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
	marker := filepath.Join(prefix, ".fledge-install-complete")
	if _, err := os.Stat(marker); err == nil {
		return prefix
	}
	staging := prefix + ".staging"
	require.NoError(t, os.RemoveAll(staging))
	require.NoError(t, os.MkdirAll(staging, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", staging, pkg)
	cmd.Env = append(os.Environ(), "HOME="+npmHome, "npm_config_update_notifier=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(staging)
		if offlineRe.MatchString(out.String()) {
			t.Skipf("npm cannot reach the registry (and %s is not in its cache), so the official MCP servers cannot be installed: %v\n%s", pkg, err, lastLines(out.String(), 5))
		}
		t.Fatalf("npm install %s: %v\n%s", pkg, err, lastLines(out.String(), 20))
	}
	_, err = os.Stat(filepath.Join(staging, "node_modules", name, "package.json"))
	require.NoError(t, err, "npm install %s succeeded but left no package.json:\n%s", pkg, lastLines(out.String(), 20))
	require.NoError(t, os.WriteFile(filepath.Join(staging, ".fledge-install-complete"), []byte(pkg+"\n"), 0o644))
	require.NoError(t, os.RemoveAll(prefix))
	require.NoError(t, os.Rename(staging, prefix))
	return prefix
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyTree copies node_modules (files, dirs, relative links) with cp -a.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	require.NoError(t, err, string(out))
}
