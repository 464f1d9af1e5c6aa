// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"
)

// HandshakeFile is where install keeps what a self-describing plugin (jsonrpc-2.0) said in
// its handshake (tools with parameters, hooks, priority), so listing never starts it. It is
// host-owned: a source tree's file of that name is not copied. Every start compares the live
// handshake with it.
const HandshakeFile = "handshake.json"

// ExecutableMeta is what fledge writes into the plugin.toml of a bare executable it wraps.
type ExecutableMeta struct {
	Name, Version, Description, Protocol string
	// Binary is the executable's file name inside the wrapping dir.
	Binary string
	// Filesystem and Network are the capabilities it declares; the user grants them (or
	// not) as for any plugin.
	Filesystem string
	Network    bool
}

// WriteExecutableManifest writes dir/plugin.toml for a bare executable (a plugin distributed
// as one file, as the JSON-RPC 2.0 spec does): one command named after the plugin, running
// Binary. The result is validated like any manifest.
func WriteExecutableManifest(dir string, em ExecutableMeta) (*Manifest, error) {
	m := struct {
		Plugin       Meta         `toml:"plugin"`
		Commands     []Command    `toml:"commands"`
		Capabilities Capabilities `toml:"capabilities"`
	}{
		Plugin:       Meta{Name: em.Name, Version: em.Version, Description: em.Description, Protocol: em.Protocol},
		Commands:     []Command{{Name: em.Name, Binary: em.Binary, Description: "the plugin executable"}},
		Capabilities: Capabilities{Filesystem: em.Filesystem, Network: NetworkCap{All: em.Network}},
	}
	var buf bytes.Buffer
	buf.WriteString("# Written by fledge for a plugin installed as a bare executable.\n")
	if err := toml.NewEncoder(&buf).Encode(m); err != nil {
		return nil, err
	}
	man, _, err := ParseManifest(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", em.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return man, nil
}
