// SPDX-License-Identifier: MIT

// Package scaffold creates a new, working fledge-v1 plugin from the templates embedded in
// this package (`fledge plugins new`). Render is pure; Create writes into a directory that
// must not exist yet, so it never overwrites anybody's work.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/template"

	"github.com/fledgehq/fledge/plugin"
)

//go:embed all:templates
var templates embed.FS

var (
	// ErrInvalidName: the name is not a valid plugin and command name.
	ErrInvalidName = errors.New("invalid plugin name")
	// ErrUnknownLang: no templates for that language.
	ErrUnknownLang = errors.New("unknown language")
	// ErrExists: the target directory already exists.
	ErrExists = errors.New("target already exists")
)

// Languages are the supported --lang values.
var Languages = []string{"bash", "python", "go", "go-wasm"}

// Options says what to create.
type Options struct {
	Name string // plugin and command name: [a-z0-9][a-z0-9_-]*, at most 64 bytes
	Lang string // one of Languages ("go-wasm": Go built for GOOS=wasip1, runtime = "wasm")
	Dir  string // the plugin directory to create (Create only); must not exist
	// SDKDir (go, go-wasm) is a local fledge checkout for a replace directive in go.mod; the
	// SDK module is not published, so without it go.mod carries a commented example.
	SDKDir string
}

// File is one rendered file, its Path relative to the plugin dir.
type File struct {
	Path string
	Mode fs.FileMode
	Data []byte
}

// data is what templates see.
type data struct {
	Name, Lang, LangTitle, Main, GoVersion, SDKDir string
}

var mains = map[string]string{"bash": "main.sh", "python": "main.py", "go": "main.go", "go-wasm": "main.go"}
var titles = map[string]string{
	"bash": "bash", "python": "Python 3, standard library only", "go": "Go, with the fledge SDK",
	"go-wasm": "Go compiled to WebAssembly (wasip1), with the fledge SDK",
}

// executables are the rendered files fledge or the user runs.
var executables = map[string]bool{"main.sh": true, "main.py": true, "run.sh": true}

// renames maps template names to file names that cannot be stored as such (a dot file
// would be left out of a plain go:embed pattern and hidden in listings).
var renames = map[string]string{"gitignore": ".gitignore"}

// fallbackGoVersion is the go directive when the toolchain's version is not a release.
const fallbackGoVersion = "1.26"

// goVersion is the go directive for a new go.mod: the version of the toolchain that built
// fledge, which is new enough for the SDK (and what `go mod tidy` would write anyway).
func goVersion() string {
	v := strings.TrimPrefix(runtime.Version(), "go")
	for _, r := range v {
		if (r < '0' || r > '9') && r != '.' {
			return fallbackGoVersion // devel builds, "1.27rc1", ...
		}
	}
	if strings.Count(v, ".") < 1 {
		return fallbackGoVersion
	}
	return v
}

// IsGo reports whether lang is built with the Go toolchain and the SDK (go.mod, --sdk).
func IsGo(lang string) bool { return lang == "go" || lang == "go-wasm" }

// Render returns the files of a new plugin, sorted by path. It validates the name and
// language and checks that the rendered plugin.toml is one fledge would install.
func Render(o Options) ([]File, error) {
	if !plugin.ValidName(o.Name) {
		return nil, fmt.Errorf("%w %q: use lowercase letters, digits, '-' and '_', starting with a letter or digit, at most %d characters",
			ErrInvalidName, o.Name, plugin.MaxNameLen)
	}
	main, ok := mains[o.Lang]
	if !ok {
		return nil, fmt.Errorf("%w %q: choose one of %s", ErrUnknownLang, o.Lang, strings.Join(Languages, ", "))
	}
	sdk := ""
	if IsGo(o.Lang) && o.SDKDir != "" {
		abs, err := filepath.Abs(o.SDKDir)
		if err != nil {
			return nil, fmt.Errorf("sdk dir: %w", err)
		}
		if strings.ContainsAny(abs, "\n\r\"`") {
			return nil, fmt.Errorf("sdk dir %q: unusable in go.mod", abs)
		}
		sdk = abs
	}
	d := data{Name: o.Name, Lang: o.Lang, LangTitle: titles[o.Lang], Main: main, GoVersion: goVersion(), SDKDir: sdk}

	root := path.Join("templates", o.Lang)
	entries, err := fs.ReadDir(templates, root)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".tmpl")
		if e.IsDir() || !ok {
			continue
		}
		src, err := fs.ReadFile(templates, path.Join(root, e.Name()))
		if err != nil {
			return nil, err
		}
		t, err := template.New(e.Name()).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("template %s/%s: %w", o.Lang, e.Name(), err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, d); err != nil {
			return nil, fmt.Errorf("template %s/%s: %w", o.Lang, e.Name(), err)
		}
		if r, ok := renames[name]; ok {
			name = r
		}
		mode := fs.FileMode(0o644)
		if executables[name] {
			mode = 0o755
		}
		files = append(files, File{Path: name, Mode: mode, Data: buf.Bytes()})
	}
	if sdk != "" {
		// The checkout's go.sum holds the checksums of everything the SDK needs, verified when
		// that checkout downloaded them. Seeding the plugin's go.sum with it lets `go mod tidy`
		// run offline (GOPROXY=off, or a proxy without the checksum database) instead of
		// looking each module up in the checksum database; tidy drops the lines not needed.
		sum, err := os.ReadFile(filepath.Join(sdk, "go.sum"))
		switch {
		case err == nil:
			files = append(files, File{Path: "go.sum", Mode: 0o644, Data: sum})
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("sdk dir: %w", err)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for _, f := range files {
		if f.Path != plugin.ManifestFile {
			continue
		}
		// The same parser install uses: a reserved command name ("run", "audit", ...) or
		// anything else fledge would refuse is caught here, before a file is written.
		if _, _, err := plugin.ParseManifest(f.Data); err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrInvalidName, o.Name, err)
		}
	}
	return files, nil
}

// Create renders the plugin and writes it into o.Dir, which must not exist (its parent is
// created if needed). On failure nothing it created is left behind.
func Create(o Options) ([]File, error) {
	files, err := Render(o)
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		return nil, errors.New("scaffold: no target directory")
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(o.Dir)), 0o755); err != nil {
		return nil, err
	}
	// Mkdir, not MkdirAll: it fails if anything (dir, file, symlink) is already there.
	if err := os.Mkdir(o.Dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s (choose another --dir, or remove it)", ErrExists, o.Dir)
		}
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(o.Dir)
		}
	}()
	for _, f := range files {
		p := filepath.Join(o.Dir, filepath.FromSlash(f.Path))
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
		if err != nil {
			return nil, err
		}
		_, err = w.Write(f.Data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", p, err)
		}
		// The umask may have cleared execute bits the plugin needs.
		if err := os.Chmod(p, f.Mode); err != nil {
			return nil, err
		}
	}
	ok = true
	return files, nil
}
