// SPDX-License-Identifier: MIT

package scaffold

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fledgehq/fledge/plugin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestRenderGolden pins every rendered file of every language (name "demo-plugin").
func TestRenderGolden(t *testing.T) {
	for _, lang := range Languages {
		t.Run(lang, func(t *testing.T) {
			files, err := Render(Options{Name: "demo-plugin", Lang: lang})
			require.NoError(t, err)
			dir := filepath.Join("testdata", "golden", lang)
			if *update {
				require.NoError(t, os.RemoveAll(dir))
				require.NoError(t, os.MkdirAll(dir, 0o755))
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Path)
				// The go directive follows the toolchain; the golden file does not.
				got := bytes.ReplaceAll(f.Data, []byte("go "+goVersion()+"\n"), []byte("go GOVERSION\n"))
				golden := filepath.Join(dir, f.Path+".golden")
				if *update {
					require.NoError(t, os.WriteFile(golden, got, 0o644))
					continue
				}
				want, err := os.ReadFile(golden)
				require.NoError(t, err, "run go test ./scaffold -update")
				assert.Equal(t, string(want), string(got), f.Path)
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, len(names), "golden files without a rendered file: %v", names)
		})
	}
}

func TestRenderFiles(t *testing.T) {
	for _, tc := range []struct {
		lang  string
		files []string
		exec  []string
	}{
		{"bash", []string{"README.md", "main.sh", "plugin.toml"}, []string{"main.sh"}},
		{"python", []string{"README.md", "main.py", "plugin.toml"}, []string{"main.py"}},
		{"go", []string{".gitignore", "README.md", "go.mod", "main.go", "plugin.toml", "run.sh"}, []string{"run.sh"}},
		{"go-wasm", []string{".gitignore", "README.md", "go.mod", "main.go", "plugin.toml"}, nil},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			files, err := Render(Options{Name: "x1", Lang: tc.lang})
			require.NoError(t, err)
			var names, execs []string
			for _, f := range files {
				names = append(names, f.Path)
				if f.Mode&0o111 != 0 {
					execs = append(execs, f.Path)
				}
				assert.NotContains(t, string(f.Data), "{{", f.Path)
				assert.NotContains(t, string(f.Data), "<no value>", f.Path)
			}
			assert.Equal(t, tc.files, names)
			assert.Equal(t, tc.exec, execs)

			m, warnings, err := plugin.ParseManifest(fileData(t, files, "plugin.toml"))
			require.NoError(t, err)
			assert.Empty(t, warnings)
			assert.True(t, m.IsProtocol())
			assert.Equal(t, []string{"x1"}, m.CommandNames())
			assert.Equal(t, "store", m.Declared().String())
		})
	}
}

func fileData(t *testing.T, files []File, name string) []byte {
	t.Helper()
	for _, f := range files {
		if f.Path == name {
			return f.Data
		}
	}
	t.Fatalf("no %s rendered", name)
	return nil
}

func TestRenderGoSDKDir(t *testing.T) {
	files, err := Render(Options{Name: "g", Lang: "go", SDKDir: "/src/fledge"})
	require.NoError(t, err)
	assert.Contains(t, string(fileData(t, files, "go.mod")), "\nreplace github.com/fledgehq/fledge => /src/fledge\n")

	files, err = Render(Options{Name: "g", Lang: "go"})
	require.NoError(t, err)
	assert.Contains(t, string(fileData(t, files, "go.mod")), "// replace github.com/fledgehq/fledge => /path/to/fledge")

	_, err = Render(Options{Name: "g", Lang: "go", SDKDir: "/src/a\nreplace x => y"})
	assert.Error(t, err)
	// SDKDir means nothing to other languages.
	_, err = Render(Options{Name: "g", Lang: "bash", SDKDir: "/src/a\nb"})
	assert.NoError(t, err)
}

func TestRenderRejects(t *testing.T) {
	for _, tc := range []struct {
		name, lang string
		want       error
	}{
		{"", "bash", ErrInvalidName},
		{"Hello", "bash", ErrInvalidName},
		{"-x", "bash", ErrInvalidName},
		{"_x", "bash", ErrInvalidName},
		{"a/b", "bash", ErrInvalidName},
		{"..", "bash", ErrInvalidName},
		{"a b", "python", ErrInvalidName},
		{"héllo", "python", ErrInvalidName},
		{strings.Repeat("a", 65), "go", ErrInvalidName},
		{"run", "bash", ErrInvalidName},   // fledge's own command
		{"plugins", "go", ErrInvalidName}, // fledge's own command
		{"x", "ruby", ErrUnknownLang},
		{"x", "", ErrUnknownLang},
		{"x", "Bash", ErrUnknownLang},
	} {
		_, err := Render(Options{Name: tc.name, Lang: tc.lang})
		assert.ErrorIs(t, err, tc.want, "%q %q", tc.name, tc.lang)
	}
	_, err := Render(Options{Name: strings.Repeat("a", 64), Lang: "bash"})
	assert.NoError(t, err, "64 bytes is the limit, inclusive")
}

func TestCreate(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "deep", "new-plugin")
	files, err := Create(Options{Name: "new-plugin", Lang: "python", Dir: dir})
	require.NoError(t, err)
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f.Path))
		require.NoError(t, err)
		assert.Equal(t, f.Mode, st.Mode().Perm(), f.Path)
		got, err := os.ReadFile(filepath.Join(dir, f.Path))
		require.NoError(t, err)
		assert.Equal(t, f.Data, got)
	}
	// What install reads: the manifest and an existing, executable binary.
	m, _, err := plugin.LoadManifest(dir)
	require.NoError(t, err)
	assert.Equal(t, "new-plugin", m.Plugin.Name)
}

func TestCreateRefusesExisting(t *testing.T) {
	base := t.TempDir()
	existing := filepath.Join(base, "mine")
	require.NoError(t, os.Mkdir(existing, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(existing, "keep.txt"), []byte("precious"), 0o644))
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, []byte("precious"), 0o644))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(filepath.Join(base, "nowhere"), link))

	for _, dir := range []string{existing, file, link} {
		_, err := Create(Options{Name: "p", Lang: "bash", Dir: dir})
		assert.ErrorIs(t, err, ErrExists, dir)
	}
	entries, err := os.ReadDir(existing)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	b, _ := os.ReadFile(filepath.Join(existing, "keep.txt"))
	assert.Equal(t, "precious", string(b))
	b, _ = os.ReadFile(file)
	assert.Equal(t, "precious", string(b))
	_, err = os.Lstat(filepath.Join(base, "nowhere"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "the dangling symlink was not followed")

	// A bad name fails before anything is created.
	_, err = Create(Options{Name: "Bad", Lang: "bash", Dir: filepath.Join(base, "bad")})
	assert.ErrorIs(t, err, ErrInvalidName)
	_, err = os.Stat(filepath.Join(base, "bad"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// TestScriptsParse runs the shells' and Python's own syntax checks on the templates.
func TestScriptsParse(t *testing.T) {
	for _, tc := range []struct{ lang, file, prog string }{
		{"bash", "main.sh", "bash"},
		{"go", "run.sh", "sh"},
		{"python", "main.py", "python3"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			if _, err := exec.LookPath(tc.prog); err != nil {
				t.Skipf("%s not on PATH", tc.prog)
			}
			dir := filepath.Join(t.TempDir(), "p")
			_, err := Create(Options{Name: "p", Lang: tc.lang, Dir: dir})
			require.NoError(t, err)
			args := []string{"-n", filepath.Join(dir, tc.file)}
			if tc.prog == "python3" {
				args = []string{"-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())", filepath.Join(dir, tc.file)}
			}
			out, err := exec.Command(tc.prog, args...).CombinedOutput()
			assert.NoError(t, err, "%s", out)
		})
	}
}

// TestGoTemplateBuilds compiles the Go template against this checkout's SDK.
func TestGoTemplateBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "gp")
	_, err = Create(Options{Name: "gp", Lang: "go", Dir: dir, SDKDir: repo})
	require.NoError(t, err)
	cmd := exec.Command(goBin, "build", "-o", filepath.Join("bin", "gp"), ".")
	cmd.Dir = dir
	// Offline: everything the SDK needs is in this checkout and the standard library.
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	st, err := os.Stat(filepath.Join(dir, "bin", "gp"))
	require.NoError(t, err)
	assert.NotZero(t, st.Mode()&0o111)
}

// TestGoWasmTemplateBuilds compiles the go-wasm template for wasip1 against this checkout's
// SDK, and checks that the manifest declares the module it builds.
func TestGoWasmTemplateBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "gw")
	_, err = Create(Options{Name: "gw", Lang: "go-wasm", Dir: dir, SDKDir: repo})
	require.NoError(t, err)
	cmd := exec.Command(goBin, "build", "-o", filepath.Join("bin", "gw.wasm"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	mod, err := os.ReadFile(filepath.Join(dir, "bin", "gw.wasm"))
	require.NoError(t, err)
	assert.Equal(t, []byte("\x00asm"), mod[:4])
	m, warnings, err := plugin.LoadManifest(dir)
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.True(t, m.IsWasm())
	assert.Equal(t, "bin/gw.wasm", m.Command("gw").Binary)
}
