// SPDX-License-Identifier: MIT

package fledgev1

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/testkit/testutil"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/platform"
	"github.com/fledgehq/fledge/ui"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is safe for concurrent writers (shared test helper).
type syncBuffer = testutil.SyncBuffer

// memStore is the StateStore for tests that do not exercise the file-backed store.
type fixture struct {
	t         *testing.T
	home      string
	configDir string
	stateDir  string
	project   string
	pluginDir string
	dataDir   string
	auditPath string
	stdout    *syncBuffer
	stderr    *syncBuffer
	opts      Options
}

// newFixture lays out a throwaway home, config dir, project and installed plugin dir with a
// copy of the named testdata plugin, and builds session options the way cmd/fledge does.
func newFixture(t *testing.T, pluginFile string, grants protocol.Capabilities) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{
		t:         t,
		home:      filepath.Join(root, "home"),
		configDir: filepath.Join(root, "home", ".config", "fledge"),
		stateDir:  filepath.Join(root, "home", ".local", "state", "fledge"),
		project:   filepath.Join(root, "work", "proj"),
		stdout:    &syncBuffer{},
		stderr:    &syncBuffer{},
	}
	f.pluginDir = filepath.Join(f.configDir, "plugins", "tp")
	f.dataDir = filepath.Join(f.pluginDir, "data")
	f.auditPath = filepath.Join(f.stateDir, "audit.jsonl")
	for _, d := range []string{f.home, f.project, f.dataDir, f.stateDir} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	require.NoError(t, os.WriteFile(filepath.Join(f.project, "fledge.toml"), []byte("[project]\nname = \"proj\"\n"), 0o644))
	src, err := os.ReadFile(filepath.Join("testdata", "plugins", pluginFile))
	require.NoError(t, err)
	program := filepath.Join(f.pluginDir, pluginFile)
	require.NoError(t, os.WriteFile(program, src, 0o755))

	sb, err := platform.New(platform.Options{})
	require.NoError(t, err)
	if c, ok := sb.(io.Closer); ok {
		t.Cleanup(func() { assert.NoError(t, c.Close(), "sandbox cleanup") })
	}
	log, err := audit.Open(f.auditPath, audit.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = log.Close() })

	cfg := policy.Default()
	g := policy.Grants{Exec: grants.Exec, Store: grants.Store, Metadata: grants.Metadata, Network: grants.Network, Filesystem: grants.Filesystem}
	paths := policy.Paths{
		ProjectRoot: f.project, PluginDir: f.pluginDir, PluginDataDir: f.dataDir,
		ConfigDir: f.configDir, StateDir: f.stateDir, AuditLog: f.auditPath,
		UserPATH: []string{"/usr/local/bin", "/usr/bin", "/bin"}, Home: f.home,
		// As cmd/fledge does: the plugin dir entry by entry, so state.json stays out of reach.
		PluginDirEntries: listDir(t, f.pluginDir),
	}
	environ := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.home, "LANG=C.UTF-8", "GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789"}
	store := newTestStore(t, filepath.Join(f.pluginDir, "state.json"))
	f.opts = Options{
		SessionID:     "test-session",
		FledgeVersion: "test",
		Plugin:        PluginMeta{Name: "tp", Version: "1.0.0", Dir: f.pluginDir, DataDir: f.dataDir, Source: "testdata"},
		Command:       "tp",
		Program:       program,
		Grants:        grants,
		Project:       nil,
		UI:            ui.New(ui.Options{In: nil, Out: f.stdout, Err: f.stderr, NonInteractive: true}),
		Sandbox:       sb,
		Audit:         log,
		Store:         store,
		Stderr:        f.stderr,
		PluginSpec: sandbox.Spec{
			Env:        policy.ChildEnv(environ, nil, map[string]string{"FLEDGE_PLUGIN": "tp"}),
			Access:     policy.PluginAccess(paths, g, cfg),
			Network:    grants.Network,
			Limits:     cfg.PluginLimits(),
			PrivateTmp: true,
		},
		PluginCwd: f.dataDir,
		ExecSpec: sandbox.Spec{
			Env:     policy.ChildEnv(environ, nil, nil),
			Access:  policy.ExecAccess(paths, cfg),
			Network: true,
			Limits:  cfg.ExecLimits(),
		},
		ExecRoots:   []string{f.project, f.pluginDir},
		GitAccess:   policy.GitAccess(paths),
		MetadataEnv: policy.MetadataEnv(environ, nil),
		Limits:      Limits{CancelGrace: 300 * time.Millisecond, KillAfter: time.Second, PromptTimeout: 5 * time.Second},
	}
	return f
}

func (f *fixture) run(args ...string) *Outcome {
	f.t.Helper()
	f.opts.Args = args
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := Run(ctx, f.opts)
	require.NoError(f.t, err, "stderr:\n%s", f.stderr.String())
	require.NotNil(f.t, out)
	return out
}

// scripted runs scripted.py with steps and returns what it reported.
type scriptReport struct {
	Init    protocol.Init              `json:"init"`
	Replies map[string]json.RawMessage `json:"replies"`
}

func (f *fixture) runScript(steps ...any) (*Outcome, scriptReport) {
	f.t.Helper()
	if steps == nil {
		steps = []any{}
	}
	js, err := json.Marshal(steps)
	require.NoError(f.t, err)
	out := f.run(string(js))
	var rep scriptReport
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	last := lines[len(lines)-1]
	require.NoError(f.t, json.Unmarshal([]byte(last), &rep), "stdout:\n%s\nstderr:\n%s", f.stdout.String(), f.stderr.String())
	return out, rep
}

func (f *fixture) reply(rep scriptReport, id string) map[string]any {
	f.t.Helper()
	raw, ok := rep.Replies[id]
	require.True(f.t, ok, "no reply for id %s; replies: %v; stderr:\n%s", id, rep.Replies, f.stderr.String())
	var m map[string]any
	require.NoError(f.t, json.Unmarshal(raw, &m))
	return m
}

// auditRecords reads every record of this fixture's log.
func (f *fixture) auditRecords() []*audit.Record {
	f.t.Helper()
	var out []*audit.Record
	require.NoError(f.t, audit.Read(f.auditPath, func(r *audit.Record) error {
		out = append(out, r)
		return nil
	}))
	return out
}

func (f *fixture) findRecords(event string) []*audit.Record {
	var out []*audit.Record
	for _, r := range f.auditRecords() {
		if r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
