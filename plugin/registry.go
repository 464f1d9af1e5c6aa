// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/ui/clip"
)

// RegistryFile is the registry's name inside the config dir.
const RegistryFile = "plugins.toml"

// MaxRegistryBytes bounds plugins.toml.
const MaxRegistryBytes = 8 << 20

var (
	// ErrNotInstalled: no installed plugin has that name.
	ErrNotInstalled = errors.New("plugin not installed")
	// ErrUnknownCommand: no installed plugin provides that command.
	ErrUnknownCommand = errors.New("unknown command")
	// ErrCorruptRegistry: plugins.toml cannot be parsed or is inconsistent. It is never
	// replaced silently: it records what the user granted.
	ErrCorruptRegistry = errors.New("plugins.toml is corrupt")
)

// Entry is one installed plugin as recorded at install time. At run time only Granted counts,
// never the live manifest.
type Entry struct {
	Name           string        `toml:"name" json:"name"`
	Source         string        `toml:"source" json:"source"` // credentials stripped
	Version        string        `toml:"version" json:"version"`
	Installed      time.Time     `toml:"installed" json:"installed"`
	Commands       []string      `toml:"commands" json:"commands"`
	Granted        policy.Grants `toml:"granted" json:"granted"`
	ManifestSHA256 string        `toml:"manifest_sha256" json:"manifest_sha256"`
	Protocol       string        `toml:"protocol" json:"protocol"` // "" = legacy
	// Read are paths granted read-only beyond the filesystem level (plugins grant
	// NAME read=PATH; policy.CheckReadGrant says which may be).
	Read []string `toml:"read,omitempty" json:"read,omitempty"`
	// Tools are the user's allow/deny globs over the plugin's tools (plugins tools NAME;
	// policy.DecideTool); nil: none.
	Tools *policy.ToolRules `toml:"tools,omitempty" json:"tools,omitempty"`
	// NPM is how an npm plugin was asked for (package, version, server arguments and
	// environment, entry point, declared capabilities); nil for other sources. `plugins
	// update` fetches the package again with exactly this. It lives here, in fledge's own
	// state, never in the plugin dir, which the package's install scripts can write. Not in
	// JSON output: an environment value may be a token.
	NPM *NPMRequest `toml:"npm,omitempty" json:"-"`
	// PyPI is how a PyPI plugin was asked for, with the lock of every wheel installed
	// (name, version, sha256); nil for other sources. As NPM: fledge's own state.
	PyPI *PyPIRequest `toml:"pypi,omitempty" json:"-"`
	// Digest is the content digest of the plugin dir as installed (TreeDigest), for sources
	// fledge pins by content (pypi:); checked before each start of such a plugin, at update
	// and at sync. "" = not recorded.
	Digest string `toml:"digest,omitempty" json:"digest,omitempty"`
	// OCI is how an image plugin was asked for and the manifest digest it is pinned to
	// (PinnedDigest); nil for other sources. Not in JSON output, as NPM.
	OCI *OCIRecord `toml:"oci,omitempty" json:"-"`
}

// Capabilities is the granted set in the shape the init message carries.
func (e *Entry) Capabilities() protocol.Capabilities {
	return protocol.Capabilities{Exec: e.Granted.Exec, Store: e.Granted.Store, Metadata: e.Granted.Metadata,
		Network: e.Granted.Network, Filesystem: e.Granted.FS()}
}

// Registry is <config>/plugins.toml.
type Registry struct {
	Plugins []Entry `toml:"plugins"`
	path    string
}

// Dir returns <configDir>/plugins/<name>. name must already be valid (ValidName).
func Dir(configDir, name string) string { return filepath.Join(configDir, "plugins", name) }

// DataDir returns the plugin's private writable data dir.
func DataDir(configDir, name string) string { return filepath.Join(Dir(configDir, name), "data") }

// StatePath returns the plugin's state.json.
func StatePath(configDir, name string) string { return filepath.Join(Dir(configDir, name), StateFile) }

// LoadRegistry reads <configDir>/plugins.toml; a missing file is an empty registry. A symlink
// there is refused (ErrUnsafeFile), as is a file that does not parse (ErrCorruptRegistry).
func LoadRegistry(configDir string) (*Registry, error) {
	path := filepath.Join(configDir, RegistryFile)
	r := &Registry{path: path}
	data, err := readRegular(path, MaxRegistryBytes)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	if _, err := toml.Decode(string(data), r); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptRegistry, path, err)
	}
	names, cmds := map[string]bool{}, map[string]string{}
	for i := range r.Plugins {
		e := &r.Plugins[i]
		if !ValidName(e.Name) || names[e.Name] {
			return nil, fmt.Errorf("%w: %s: entry %d has an invalid or duplicate name %q", ErrCorruptRegistry, path, i+1, clip.Bytes(e.Name, 80))
		}
		if !policy.ValidFilesystem(e.Granted.Filesystem) {
			return nil, fmt.Errorf("%w: %s: plugin %q has an invalid filesystem grant", ErrCorruptRegistry, path, e.Name)
		}
		e.Granted.Filesystem = e.Granted.FS()
		names[e.Name] = true
		for _, c := range e.Commands {
			if other, ok := cmds[c]; ok {
				return nil, fmt.Errorf("%w: %s: command %q is claimed by both %q and %q", ErrCorruptRegistry, path, c, other, e.Name)
			}
			cmds[c] = e.Name
		}
	}
	return r, nil
}

// Path is the registry file.
func (r *Registry) Path() string { return r.path }

// Save writes the registry atomically (0600; never through a symlink planted at the path).
func (r *Registry) Save() error {
	sort.Slice(r.Plugins, func(i, j int) bool { return r.Plugins[i].Name < r.Plugins[j].Name })
	var buf bytes.Buffer
	buf.WriteString("# Installed fledge plugins and the capabilities the user granted. Written by fledge.\n")
	if err := toml.NewEncoder(&buf).Encode(r); err != nil {
		return err
	}
	if buf.Len() > MaxRegistryBytes {
		return fmt.Errorf("%s: %w", r.path, ErrTooLarge)
	}
	return writeFileAtomic(r.path, buf.Bytes(), 0o600)
}

// Find returns the entry named name, or nil.
func (r *Registry) Find(name string) *Entry {
	for i := range r.Plugins {
		if r.Plugins[i].Name == name {
			return &r.Plugins[i]
		}
	}
	return nil
}

// FindCommand returns the plugin providing cmd, or ErrUnknownCommand.
func (r *Registry) FindCommand(cmd string) (*Entry, error) {
	for i := range r.Plugins {
		for _, c := range r.Plugins[i].Commands {
			if c == cmd {
				return &r.Plugins[i], nil
			}
		}
	}
	return nil, fmt.Errorf("%w: %q (no installed plugin provides it)", ErrUnknownCommand, clip.Bytes(cmd, 80))
}

// Put adds e or replaces the entry with the same name.
func (r *Registry) Put(e Entry) {
	if old := r.Find(e.Name); old != nil {
		*old = e
		return
	}
	r.Plugins = append(r.Plugins, e)
}

// Delete removes the entry named name; it reports whether there was one.
func (r *Registry) Delete(name string) bool {
	for i := range r.Plugins {
		if r.Plugins[i].Name == name {
			r.Plugins = append(r.Plugins[:i], r.Plugins[i+1:]...)
			return true
		}
	}
	return false
}
