// SPDX-License-Identifier: MIT

// Package adaptertest builds what the protocol adapters' tests need: a throwaway config and
// state dir, a project, real installed plugins (plugin.Install with the grants given), the
// machine's real sandbox, an audit log, and the tools catalogue over them.
package adaptertest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/project"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/testkit/testutil"
)

// Fixture is one test's machine.
type Fixture struct {
	T       *testing.T
	Root    string
	Project *project.Info
	Env     *core.Env
	Stderr  *testutil.SyncBuffer
}

// New makes a fixture with the default policy (cfg may adjust it).
func New(t *testing.T, cfg func(*policy.Config)) *Fixture {
	t.Helper()
	root := t.TempDir()
	f := &Fixture{T: t, Root: root, Stderr: &testutil.SyncBuffer{}}
	conf := policy.Default()
	if cfg != nil {
		cfg(conf)
	}
	proj := filepath.Join(root, "proj")
	for _, d := range []string{filepath.Join(root, "config"), filepath.Join(root, "state"), proj} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(proj, "fledge.toml"), []byte("[project]\nname = \"proj\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proj, "secret.txt"), []byte("project secret\n"), 0o644))
	pi, err := project.Detect(proj, proj)
	require.NoError(t, err)
	f.Project = pi
	sb, err := platform.New(platform.Options{})
	require.NoError(t, err)
	f.Env = &core.Env{ConfigDir: filepath.Join(root, "config"), StateDir: filepath.Join(root, "state"),
		AuditPath: filepath.Join(root, "state", "audit.jsonl"), Config: conf, Sandbox: sb}
	t.Cleanup(func() {
		if c, ok := sb.(io.Closer); ok {
			assert.NoError(t, c.Close(), "sandbox cleanup")
		}
		_ = f.Env.Close()
	})
	return f
}

// Install writes a plugin source dir (files: name -> content; names ending in .py or .sh
// are executable) and installs it with the given grants.
func (f *Fixture) Install(files map[string]string, grants policy.Grants) *plugin.Entry {
	f.T.Helper()
	require.NoError(f.T, os.MkdirAll(filepath.Join(f.Root, "src"), 0o755))
	src, err := os.MkdirTemp(filepath.Join(f.Root, "src"), "plugin-")
	require.NoError(f.T, err)
	require.NoError(f.T, os.Chmod(src, 0o755))
	for name, content := range files {
		mode := os.FileMode(0o644)
		if ext := filepath.Ext(name); ext == ".py" || ext == ".sh" {
			mode = 0o755
		}
		p := filepath.Join(src, name)
		require.NoError(f.T, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.T, os.WriteFile(p, []byte(content), mode))
	}
	g := grants
	en, err := plugin.Install(context.Background(), plugin.InstallOptions{ConfigDir: f.Env.ConfigDir, Source: src, Grant: &g, NonInteractive: true})
	require.NoError(f.T, err)
	return en
}

// Catalogue is the tools catalogue over the installed plugins.
func (f *Fixture) Catalogue() *tools.Catalogue {
	f.T.Helper()
	reg, err := plugin.LoadRegistry(f.Env.ConfigDir)
	require.NoError(f.T, err)
	c := tools.NewCatalogue(&tools.Host{Env: f.Env, Project: f.Project, Stderr: f.Stderr}, reg)
	f.T.Cleanup(func() { _ = c.Close() })
	return c
}

// Binding binds an installed plugin the way a command does.
func (f *Fixture) Binding(name string) *core.Binding {
	f.T.Helper()
	reg, err := plugin.LoadRegistry(f.Env.ConfigDir)
	require.NoError(f.T, err)
	en := reg.Find(name)
	require.NotNil(f.T, en, "plugin %s installed", name)
	b, err := f.Env.Bind(en, f.Project)
	require.NoError(f.T, err)
	return b
}

// Records are the audit log's records, oldest first.
func (f *Fixture) Records() []*audit.Record {
	f.T.Helper()
	var out []*audit.Record
	if _, err := os.Stat(f.Env.AuditPath); os.IsNotExist(err) {
		return nil
	}
	require.NoError(f.T, audit.Read(f.Env.AuditPath, func(r *audit.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

// Find returns the records of one event.
func (f *Fixture) Find(event string) []*audit.Record {
	var out []*audit.Record
	for _, r := range f.Records() {
		if r.Event == event {
			out = append(out, r)
		}
	}
	return out
}
