// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/policy"
)

// scriptedAsker answers Confirm from a fixed list, the way a user at a TTY would.
type scriptedAsker struct {
	answers   []bool
	questions []string
	defaults  []bool // the default each question offered
}

func (a *scriptedAsker) Confirm(q string, def bool) (bool, error) {
	a.questions = append(a.questions, q)
	a.defaults = append(a.defaults, def)
	if len(a.answers) == 0 {
		return false, errors.New("no more answers")
	}
	v := a.answers[0]
	a.answers = a.answers[1:]
	return v, nil
}

// copyFixture copies testdata/<name> into a temp dir so tests can modify it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.Mkdir(dst, 0o755))
	_, err := copyTree(filepath.Join("testdata", name), dst)
	require.NoError(t, err)
	return dst
}

func install(t *testing.T, cfg, src string, mod func(*InstallOptions)) (*Entry, string, error) {
	t.Helper()
	var out bytes.Buffer
	o := InstallOptions{ConfigDir: cfg, Source: src, NonInteractive: true, Out: &out,
		Now: func() time.Time { return time.Date(2026, 4, 22, 10, 0, 0, 0, time.UTC) }}
	if mod != nil {
		mod(&o)
	}
	e, err := Install(context.Background(), o)
	return e, out.String(), err
}

// assertClean: no staging/old/temp leftovers in the plugins dir or config dir.
func assertClean(t *testing.T, cfg string) {
	t.Helper()
	for _, dir := range []string{cfg, filepath.Join(cfg, "plugins")} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			assert.False(t, strings.HasPrefix(e.Name(), "."), "leftover %s in %s", e.Name(), dir)
		}
	}
}

func TestInstallFromDirYes(t *testing.T) {
	cfg := t.TempDir()
	src, err := filepath.Abs("testdata/hello")
	require.NoError(t, err)
	e, out, err := install(t, cfg, src, func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err, out)

	raw, err := os.ReadFile("testdata/hello/plugin.toml")
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	assert.Equal(t, &Entry{
		Name: "hello", Source: src, Version: "0.1.0",
		Installed:      time.Date(2026, 4, 22, 10, 0, 0, 0, time.UTC),
		Commands:       []string{"hello", "hello-loud"},
		Granted:        policy.Grants{Exec: true, Store: true, Filesystem: "project"},
		ManifestSHA256: hex.EncodeToString(sum[:]), Protocol: "fledge-v1",
	}, e)
	assert.Contains(t, out, "exec")
	assert.Contains(t, out, "filesystem=project")
	assert.Contains(t, out, "build: make", "hooks are shown")
	assert.Contains(t, out, "will NOT run")
	assert.Contains(t, out, `unknown key "extra" ignored`)

	dir := Dir(cfg, "hello")
	st, err := os.Lstat(dir)
	require.NoError(t, err)
	assert.True(t, st.IsDir(), "a copy, not a symlink")
	st, err = os.Stat(filepath.Join(dir, "bin/hello"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), "exec bit kept")
	st, err = os.Stat(DataDir(cfg, "hello"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	st, err = os.Stat(filepath.Join(cfg, RegistryFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	reg, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Equal(t, []Entry{*e}, reg.Plugins)
	got, err := reg.FindCommand("hello-loud")
	require.NoError(t, err)
	assert.Equal(t, "hello", got.Name)
	_, err = reg.FindCommand("nope")
	assert.ErrorIs(t, err, ErrUnknownCommand)
	assertClean(t, cfg)

	caps := e.Capabilities()
	assert.True(t, caps.Exec)
	assert.Equal(t, "project", caps.Filesystem)
}

func TestInstallNonInteractiveRefusesAndNamesCapabilities(t *testing.T) {
	cfg := t.TempDir()
	_, _, err := install(t, cfg, "testdata/hello", nil)
	require.ErrorIs(t, err, ErrNeedsGrant)
	assert.Contains(t, err.Error(), "exec, store, filesystem=project")
	assert.Contains(t, err.Error(), "--yes")
	assert.Contains(t, err.Error(), "--grant exec,store,filesystem=project")
	_, statErr := os.Stat(Dir(cfg, "hello"))
	assert.True(t, os.IsNotExist(statErr))
	_, statErr = os.Stat(filepath.Join(cfg, RegistryFile))
	assert.True(t, os.IsNotExist(statErr))
	assertClean(t, cfg)

	// No capabilities declared: nothing to grant, non-interactive install goes through.
	e, _, err := install(t, cfg, "testdata/legacy", nil)
	require.NoError(t, err)
	assert.True(t, e.Granted.Empty())
	assert.Equal(t, "", e.Protocol)
}

func TestInstallGrantSubset(t *testing.T) {
	cases := []struct {
		grant   string
		want    policy.Grants
		wantErr error
		msg     string
	}{
		{"exec", policy.Grants{Exec: true, Filesystem: "none"}, nil, ""},
		{"store,filesystem", policy.Grants{Store: true, Filesystem: "project"}, nil, ""},
		{"filesystem=plugin", policy.Grants{Filesystem: "plugin"}, nil, ""},
		{"none", policy.Grants{Filesystem: "none"}, nil, ""},
		{"exec,network", policy.Grants{}, ErrNotDeclared, "network"},
		{"metadata", policy.Grants{}, policy.ErrNotDeclared, "metadata"},
	}
	for _, tc := range cases {
		t.Run(tc.grant, func(t *testing.T) {
			cfg := t.TempDir()
			g, err := policy.ParseGrantList(tc.grant)
			require.NoError(t, err)
			e, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.Grant = &g; o.Yes = true })
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Contains(t, err.Error(), tc.msg)
				assertClean(t, cfg)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, e.Granted)
		})
	}
}

func TestInstallInteractiveAsksPerCapability(t *testing.T) {
	cfg := t.TempDir()
	asker := &scriptedAsker{answers: []bool{true, false, true}}
	e, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.NonInteractive = false; o.Asker = asker })
	require.NoError(t, err)
	assert.Equal(t, policy.Grants{Exec: true, Filesystem: "project"}, e.Granted)
	require.Len(t, asker.questions, 3)
	assert.Contains(t, asker.questions[0], "Grant exec to hello")
	assert.Contains(t, asker.questions[1], "Grant store")
	assert.Contains(t, asker.questions[2], "Grant filesystem=project")

	// An error from the asker (e.g. Ctrl-C) aborts the install.
	cfg2 := t.TempDir()
	_, _, err = install(t, cfg2, "testdata/hello", func(o *InstallOptions) {
		o.NonInteractive = false
		o.Asker = &scriptedAsker{}
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "install cancelled")
	assertClean(t, cfg2)
}

func TestInstallConflicts(t *testing.T) {
	cfg := t.TempDir()
	_, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err)

	// Another plugin claiming the "hello" command.
	other := writeTree(t, map[string]string{
		ManifestFile: "[plugin]\nname = \"other\"\n[[commands]]\nname = \"hello\"\nbinary = \"x\"\n",
		"x":          "#!/bin/sh\n",
	})
	_, _, err = install(t, cfg, other, nil)
	require.ErrorIs(t, err, ErrCommandTaken)
	assert.Contains(t, err.Error(), `command "hello" belongs to plugin "hello"`)

	// Same name from a different source.
	imposter := copyFixture(t, "hello")
	_, _, err = install(t, cfg, imposter, func(o *InstallOptions) { o.Yes = true })
	require.ErrorIs(t, err, ErrAlreadyInstalled)
	assert.Contains(t, err.Error(), "fledge plugins remove hello")
	assertClean(t, cfg)
}

func TestReinstallSameSourceKeepsState(t *testing.T) {
	cfg := t.TempDir()
	src := copyFixture(t, "hello")
	_, _, err := install(t, cfg, src, func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err)
	s, err := OpenStore(StatePath(cfg, "hello"), StoreLimits{})
	require.NoError(t, err)
	require.NoError(t, s.Set("k", "v"))
	require.NoError(t, os.WriteFile(filepath.Join(DataDir(cfg, "hello"), "cache"), []byte("c"), 0o600))

	// New version: fewer capabilities, a new file.
	manifest := filepath.Join(src, ManifestFile)
	raw, err := os.ReadFile(manifest)
	require.NoError(t, err)
	updated := strings.Replace(strings.Replace(string(raw), `version = "0.1.0"`, `version = "0.2.0"`, 1), "exec = true", "exec = false", 1)
	require.NoError(t, os.WriteFile(manifest, []byte(updated), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "NEW"), []byte("n"), 0o644))

	e, _, err := install(t, cfg, src, func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err)
	assert.Equal(t, "0.2.0", e.Version)
	assert.False(t, e.Granted.Exec)
	s2, err := OpenStore(StatePath(cfg, "hello"), StoreLimits{})
	require.NoError(t, err)
	v, _ := s2.Get("k")
	assert.Equal(t, "v", v)
	c, err := os.ReadFile(filepath.Join(DataDir(cfg, "hello"), "cache"))
	require.NoError(t, err)
	assert.Equal(t, "c", string(c))
	_, err = os.Stat(filepath.Join(Dir(cfg, "hello"), "NEW"))
	assert.NoError(t, err)
	reg, err := LoadRegistry(cfg)
	require.NoError(t, err)
	assert.Len(t, reg.Plugins, 1)
	assertClean(t, cfg)
}

func TestInstallTreeSafety(t *testing.T) {
	base := map[string]string{
		ManifestFile: "[plugin]\nname = \"tree\"\n[[commands]]\nname = \"tree\"\nbinary = \"bin/run\"\n",
		"bin/run":    "#!/bin/sh\n",
		"lib/x.sh":   "echo x\n",
	}
	outside := t.TempDir()
	cases := []struct {
		name    string
		mutate  func(t *testing.T, dir string)
		wantErr error
		check   func(t *testing.T, installed string)
	}{
		{"symlink inside is recreated", func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink("../lib/x.sh", filepath.Join(dir, "bin/x")))
		}, nil, func(t *testing.T, inst string) {
			target, err := os.Readlink(filepath.Join(inst, "bin/x"))
			require.NoError(t, err)
			assert.Equal(t, "../lib/x.sh", target)
		}},
		{"absolute symlink inside is made relative", func(t *testing.T, dir string) {
			real, _ := filepath.EvalSymlinks(dir)
			require.NoError(t, os.Symlink(filepath.Join(real, "lib/x.sh"), filepath.Join(dir, "bin/abs")))
		}, nil, func(t *testing.T, inst string) {
			target, err := os.Readlink(filepath.Join(inst, "bin/abs"))
			require.NoError(t, err)
			assert.Equal(t, "../lib/x.sh", target)
		}},
		{"symlink outside", func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink(outside, filepath.Join(dir, "lib/out")))
		}, ErrUnsafeTree, nil},
		{"relative symlink escaping", func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink("../../../../../etc/passwd", filepath.Join(dir, "lib/pw")))
		}, ErrUnsafeTree, nil},
		{"escape through a dir link", func(t *testing.T, dir string) {
			// Lexically "self/../sibling" stays inside; resolved, it is dir/../sibling.
			require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(dir), "sibling"), []byte("secret"), 0o600))
			require.NoError(t, os.Symlink(".", filepath.Join(dir, "self")))
			require.NoError(t, os.Symlink("self/../sibling", filepath.Join(dir, "sneaky")))
		}, ErrUnsafeTree, nil},
		{"dangling symlink", func(t *testing.T, dir string) {
			require.NoError(t, os.Symlink("missing", filepath.Join(dir, "lib/dangling")))
		}, ErrUnsafeTree, nil},
		{"fifo", func(t *testing.T, dir string) {
			require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "lib/fifo"), 0o600))
		}, ErrUnsafeTree, nil},
		{"socket", func(t *testing.T, dir string) {
			l, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
		}, ErrUnsafeTree, nil},
		{"host-owned files are not seeded", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"admin":"yes"}`), 0o644))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "data/planted"), []byte("x"), 0o644))
		}, nil, func(t *testing.T, inst string) {
			_, err := os.Stat(filepath.Join(inst, StateFile))
			assert.True(t, os.IsNotExist(err))
			_, err = os.Stat(filepath.Join(inst, "data/planted"))
			assert.True(t, os.IsNotExist(err))
		}},
		{"setuid bit dropped", func(t *testing.T, dir string) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "bin/run"), 0o4777))
		}, nil, func(t *testing.T, inst string) {
			st, err := os.Stat(filepath.Join(inst, "bin/run"))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o755), st.Mode()&(os.ModePerm|os.ModeSetuid))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := writeTree(t, base)
			tc.mutate(t, src)
			cfg := t.TempDir()
			_, _, err := install(t, cfg, src, nil)
			assertClean(t, cfg)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				_, statErr := os.Stat(Dir(cfg, "tree"))
				assert.True(t, os.IsNotExist(statErr))
				return
			}
			require.NoError(t, err)
			tc.check(t, Dir(cfg, "tree"))
		})
	}
}

func TestInstallHooks(t *testing.T) {
	src := writeTree(t, map[string]string{
		ManifestFile: "[plugin]\nname = \"built\"\n[[commands]]\nname = \"built\"\nbinary = \"bin/built\"\n" +
			"[hooks]\nbuild = \"mkdir -p bin && printf '#!/bin/sh\\\\n' > bin/built && chmod 755 bin/built\"\n",
	})
	// Without hooks the binary does not exist: the error says why.
	cfg := t.TempDir()
	_, out, err := install(t, cfg, src, nil)
	require.ErrorIs(t, err, ErrInvalidManifest)
	assert.Contains(t, err.Error(), "install hooks")
	assert.Contains(t, out, "build: mkdir -p bin")
	assertClean(t, cfg)

	// Asked for, but nobody to run them: refused rather than run unconfined.
	_, _, err = install(t, cfg, src, func(o *InstallOptions) { o.RunHooks = true })
	require.ErrorIs(t, err, ErrHooks)

	var ran []string
	runner := func(ctx context.Context, dir string, h Hook) error {
		ran = append(ran, h.Name)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.Command)
		cmd.Dir = dir
		return cmd.Run()
	}
	_, out, err = install(t, cfg, src, func(o *InstallOptions) { o.RunHooks = true; o.RunHook = runner })
	require.NoError(t, err, out)
	assert.Equal(t, []string{"build"}, ran)
	assert.Contains(t, out, "will run now")
	_, err = os.Stat(filepath.Join(Dir(cfg, "built"), "bin/built"))
	assert.NoError(t, err)

	// A hook that rewrites plugin.toml after approval is caught.
	cfg2 := t.TempDir()
	_, _, err = install(t, cfg2, src, func(o *InstallOptions) {
		o.RunHooks = true
		o.RunHook = func(ctx context.Context, dir string, h Hook) error {
			if err := runner(ctx, dir, h); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, ManifestFile), []byte("[plugin]\nname = \"built\"\n[[commands]]\nname = \"built\"\nbinary = \"bin/built\"\n[capabilities]\nexec = true\n"), 0o644)
		}
	})
	require.ErrorIs(t, err, ErrInvalidManifest)
	assert.Contains(t, err.Error(), "changed during install")
	assertClean(t, cfg2)
}

func TestInstallBadSources(t *testing.T) {
	cfg := t.TempDir()
	for _, s := range []string{"", "-upload-pack=evil", "/does/not/exist", "ext::sh -c evil", filepath.Join("testdata", "hello", ManifestFile)} {
		_, _, err := install(t, cfg, s, nil)
		assert.ErrorIs(t, err, ErrBadSource, s)
	}
	assert.True(t, IsGitURL("https://github.com/o/r.git"))
	assert.True(t, IsGitURL("git@github.com:o/r.git"))
	assert.True(t, IsGitURL("file:///srv/r.git"))
	assert.False(t, IsGitURL("ext::sh -c x"))
	assert.False(t, IsGitURL("./plugins/x"))
	assert.False(t, IsGitURL("/abs/path"))
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

func TestInstallFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is required for install tests: %v", err)
	}
	work := copyFixture(t, "hello")
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "-m", "init")
	bare := filepath.Join(t.TempDir(), "hello.git")
	git(t, filepath.Dir(bare), "clone", "-q", "--bare", work, bare)
	// A hook in the remote must never run on our side (it is not even cloned; hooksPath is
	// /dev/null for anything templates bring).
	marker := filepath.Join(t.TempDir(), "hook-ran")
	require.NoError(t, os.WriteFile(filepath.Join(bare, "hooks", "post-checkout"),
		[]byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755))

	cfg := t.TempDir()
	url := "file://" + bare
	e, out, err := install(t, cfg, url, func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err, out)
	assert.Equal(t, url, e.Source)
	assert.Equal(t, "hello", e.Name)
	_, err = os.Stat(filepath.Join(Dir(cfg, "hello"), "bin/hello"))
	assert.NoError(t, err)
	_, err = os.Stat(filepath.Join(Dir(cfg, "hello"), ".git"))
	assert.True(t, os.IsNotExist(err), ".git is not installed")
	_, err = os.Stat(marker)
	assert.True(t, os.IsNotExist(err), "no hook ran")
	assertClean(t, cfg)

	// Same URL again is a re-install, not a conflict.
	_, _, err = install(t, cfg, url, func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err)

	// A remote that does not exist fails with a clone error and leaves nothing.
	cfg2 := t.TempDir()
	_, _, err = install(t, cfg2, "file:///nonexistent/repo.git", func(o *InstallOptions) { o.Yes = true })
	require.ErrorIs(t, err, ErrClone)
	assertClean(t, cfg2)
}

func TestRemove(t *testing.T) {
	cfg := t.TempDir()
	_, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.Yes = true })
	require.NoError(t, err)
	_, _, err = install(t, cfg, "testdata/legacy", nil)
	require.NoError(t, err)

	list, err := List(cfg)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "hello", list[0].Name)
	assert.Equal(t, "legacy", list[1].Name)

	for _, hostile := range []string{"../hello", "", "/etc", "HELLO", "hello/../legacy", "nope"} {
		_, err := Remove(cfg, hostile)
		assert.ErrorIs(t, err, ErrNotInstalled, hostile)
	}
	e, err := Remove(cfg, "hello")
	require.NoError(t, err)
	assert.Equal(t, "hello", e.Name)
	_, err = os.Stat(Dir(cfg, "hello"))
	assert.True(t, os.IsNotExist(err))
	list, err = List(cfg)
	require.NoError(t, err)
	require.Len(t, list, 1)
	_, err = os.Stat(Dir(cfg, "legacy"))
	assert.NoError(t, err, "other plugins untouched")
	assertClean(t, cfg)
}

func TestGetInfo(t *testing.T) {
	cfg := t.TempDir()
	_, _, err := install(t, cfg, "testdata/hello", func(o *InstallOptions) { o.Grant = &policy.Grants{Store: true} })
	require.NoError(t, err)
	info, err := GetInfo(cfg, "hello")
	require.NoError(t, err)
	assert.False(t, info.ManifestChanged)
	assert.Equal(t, policy.Grants{Store: true, Filesystem: "none"}, info.Entry.Granted)
	assert.True(t, info.Declared.Exec, "declared is reported separately from granted")
	assert.Equal(t, DataDir(cfg, "hello"), info.DataDir)

	// Someone edits the installed manifest to declare more: info says so; grants do not move.
	mf := filepath.Join(Dir(cfg, "hello"), ManifestFile)
	raw, _ := os.ReadFile(mf)
	require.NoError(t, os.WriteFile(mf, append(raw, []byte("\n# edited\n")...), 0o644))
	info, err = GetInfo(cfg, "hello")
	require.NoError(t, err)
	assert.True(t, info.ManifestChanged)
	assert.False(t, info.Entry.Granted.Exec)

	_, err = GetInfo(cfg, "../x")
	assert.ErrorIs(t, err, ErrNotInstalled)
}

func TestConcurrentInstallsKeepBothEntries(t *testing.T) {
	cfg := t.TempDir()
	var srcs []string
	for i := 0; i < 4; i++ {
		n := string(rune('a' + i))
		srcs = append(srcs, writeTree(t, map[string]string{
			ManifestFile: "[plugin]\nname = \"p" + n + "\"\n[[commands]]\nname = \"c" + n + "\"\nbinary = \"run\"\n",
			"run":        "#!/bin/sh\n",
		}))
	}
	errs := make(chan error, len(srcs))
	for _, s := range srcs {
		go func(s string) {
			_, err := Install(context.Background(), InstallOptions{ConfigDir: cfg, Source: s, NonInteractive: true})
			errs <- err
		}(s)
	}
	for range srcs {
		require.NoError(t, <-errs)
	}
	list, err := List(cfg)
	require.NoError(t, err)
	assert.Len(t, list, len(srcs), "no install lost another's registry update")
	assertClean(t, cfg)
}
