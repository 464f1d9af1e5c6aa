// SPDX-License-Identifier: MIT

// Package project finds the project a plugin runs on and answers metadata requests about it.
// Git is consulted through the git command, hardened against repository-controlled code
// execution and bounded in time and output.
package project

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
)

// Markers that make a directory a project root.
var markers = []string{"fledge.toml", ".git"}

// ErrNotDir: --project names something that is not a directory.
var ErrNotDir = errors.New("project path is not a directory")

// Info is the detected project.
type Info struct {
	Name     string
	Root     string
	Language string
	// Marker is what made Root the project when it was detected ("fledge.toml" or ".git");
	// "" when --project named it.
	Marker string
}

// Detect returns the project for start, or nil when there is none. override (from --project)
// wins when set. The home directory and / are never a project root: a marker there means "no
// project", so a stray ~/.git cannot hand a plugin the whole home directory.
func Detect(start, override string) (*Info, error) {
	home, _ := os.UserHomeDir()
	if override != "" {
		abs, err := filepath.Abs(override)
		if err != nil {
			return nil, fmt.Errorf("project %q: %w", override, err)
		}
		abs, err = filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("project %q: %w", override, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("project %q: %w", override, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("project %q: %w", override, ErrNotDir)
		}
		if isForbiddenRoot(abs, home) {
			return nil, fmt.Errorf("project %q: the home directory and / cannot be a project root", override)
		}
		return describe(abs), nil
	}
	dir, err := filepath.Abs(start)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	for {
		if isForbiddenRoot(dir, home) {
			return nil, nil
		}
		for _, m := range markers {
			if _, err := os.Lstat(filepath.Join(dir, m)); err == nil {
				info := describe(dir)
				info.Marker = m
				return info, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, nil
		}
		dir = parent
	}
}

func isForbiddenRoot(dir, home string) bool {
	if dir == string(filepath.Separator) || filepath.Dir(dir) == dir {
		return true
	}
	if home == "" {
		return false
	}
	if h, err := filepath.EvalSymlinks(home); err == nil {
		home = h
	}
	return dir == filepath.Clean(home)
}

func describe(root string) *Info {
	info := &Info{Root: root, Name: filepath.Base(root), Language: DetectLanguage(root)}
	if cfg, err := ReadFledgeConfig(root); err == nil && cfg != nil {
		if p, ok := cfg["project"].(map[string]any); ok {
			if n, ok := p["name"].(string); ok && n != "" {
				info.Name = n
			}
			if l, ok := p["language"].(string); ok && l != "" {
				info.Language = l
			}
		}
	}
	return info
}

// languageMarkers, checked in order; the first file found names the language.
var languageMarkers = []struct{ file, lang string }{
	{"Cargo.toml", "rust"},
	{"go.mod", "go"},
	{"tsconfig.json", "typescript"},
	{"package.json", "javascript"},
	{"pyproject.toml", "python"},
	{"setup.py", "python"},
	{"requirements.txt", "python"},
	{"Gemfile", "ruby"},
	{"pom.xml", "java"},
	{"build.gradle", "java"},
	{"build.gradle.kts", "kotlin"},
	{"mix.exs", "elixir"},
	{"composer.json", "php"},
	{"CMakeLists.txt", "cpp"},
	{"Package.swift", "swift"},
	{"deno.json", "typescript"},
}

// DetectLanguage names the project's main language from marker files ("unknown" if none).
func DetectLanguage(root string) string {
	for _, m := range languageMarkers {
		if st, err := os.Lstat(filepath.Join(root, m.file)); err == nil && st.Mode().IsRegular() {
			return m.lang
		}
	}
	return "unknown"
}

// maxFledgeToml bounds what we parse from a project-controlled file.
const maxFledgeToml = 1 << 20

// ReadFledgeConfig parses <root>/fledge.toml into a generic map (nil, nil when absent).
func ReadFledgeConfig(root string) (map[string]any, error) {
	path := filepath.Join(root, "fledge.toml")
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > maxFledgeToml {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFledgeToml)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if _, err := toml.Decode(string(data), &out); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// trimLines splits command output into non-empty lines.
func trimLines(s string) []string {
	out := []string{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
