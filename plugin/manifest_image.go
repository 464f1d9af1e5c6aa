// SPDX-License-Identifier: MIT

package plugin

import (
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"path"
	"regexp"
	"strings"
	"sync"
)

// RuntimeOCI is [plugin] runtime for a plugin that is a container image: its filesystem is
// unpacked at rootfs/ in the plugin dir, its command's binary is the image's config
// (image.json, data), and what runs is the [image] table's argv, inside the sandbox with
// the image as the root of the plugin's view (protocolhost/core/image.go).
const RuntimeOCI = "oci"

// ImageConfig is the [image] table of an image plugin: what it was pinned to and how it is
// started. Part of the manifest, so the approved manifest digest covers it.
type ImageConfig struct {
	Ref    string `toml:"ref"`    // as asked for (oci:REF's REF, or oci-archive:PATH)
	Digest string `toml:"digest"` // the manifest digest it was pinned to
	// Argv is the image's ENTRYPOINT then CMD (or the arguments given at install);
	// argv[0] is looked up in the image's PATH when it has no "/".
	Argv []string `toml:"argv"`
	Env  []string `toml:"env"` // NAME=VALUE: the image's ENV, then the user's
	// WorkDir is the image's WORKDIR inside it ("/" when it has none).
	WorkDir string `toml:"workdir"`
	// User is the image's USER, kept for the record: the server runs as the user who runs
	// fledge (whose files the unpacked image's are), never as another.
	User string `toml:"user,omitempty"`
}

// Bounds of an [image] table.
const (
	maxImageArgs = 256
	maxImageEnv  = 256
)

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var envNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`) })

func (c *ImageConfig) check() error {
	switch {
	case c == nil:
		return fmt.Errorf("[image] is missing")
	case !digestRe().MatchString(c.Digest):
		return fmt.Errorf("[image] digest %q is not sha256:<64 hex digits>", clip.Bytes(c.Digest, 80))
	case len(c.Argv) == 0 || c.Argv[0] == "":
		return fmt.Errorf("[image] argv is empty")
	case len(c.Argv) > maxImageArgs:
		return fmt.Errorf("[image] argv has %d entries, more than %d", len(c.Argv), maxImageArgs)
	case len(c.Env) > maxImageEnv:
		return fmt.Errorf("[image] env has %d entries, more than %d", len(c.Env), maxImageEnv)
	case !strings.HasPrefix(c.WorkDir, "/") || path.Clean(c.WorkDir) != c.WorkDir || badText(c.WorkDir):
		return fmt.Errorf("[image] workdir %q is not an absolute clean path", clip.Bytes(c.WorkDir, 80))
	case badText(c.Ref) || badText(c.User):
		return fmt.Errorf("[image] ref or user has control characters")
	}
	for _, a := range c.Argv {
		if len(a) > maxNPMArgBytes || badText(a) {
			return fmt.Errorf("[image] argv entry %q has control characters or is longer than %d bytes", clip.Bytes(a, 80), maxNPMArgBytes)
		}
	}
	for _, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !envNameRe().MatchString(k) || len(v) > maxNPMArgBytes || badText(v) {
			return fmt.Errorf("[image] env %q: expected NAME=VALUE", clip.Bytes(kv, 80))
		}
	}
	return nil
}

// IsImage reports whether the plugin is a container image (runtime = "oci").
func (m *Manifest) IsImage() bool { return m.Plugin.Runtime == RuntimeOCI }
