// SPDX-License-Identifier: MIT

package plugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fledgehq/fledge/ui/clip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/policy"
)

// ProjectLockFile is the project's lock of its plugins: `fledge plugins lock` writes it,
// `fledge plugins sync` installs exactly what it says. Every sandbox view keeps it
// read-only (sandbox.ProtectedFiles): a plugin that could rewrite it would grant itself
// more at the next sync.
const ProjectLockFile = "fledge.lock"

// LockVersion is the format of fledge.lock.
const LockVersion = 1

// MaxLockBytes bounds fledge.lock.
const MaxLockBytes = 4 << 20

var (
	// ErrDigestMismatch: a plugin's content is not the one pinned (fledge.lock, or its
	// entry at install).
	ErrDigestMismatch = errors.New("plugin content does not match its pinned digest")
	// ErrBadLock: fledge.lock cannot be read or says something fledge cannot install.
	ErrBadLock = errors.New("fledge.lock is not usable")
)

// Lock is fledge.lock.
type Lock struct {
	Version int         `toml:"version"`
	Plugins []LockEntry `toml:"plugin"`
}

// LockEntry is one plugin, pinned: where it comes from, its exact version, the digest of
// its content (TreeDigest), its grants and its tool pins. A package source adds how it was
// asked for (NPM, PyPI; an image source its own table): what sync fetches again.
type LockEntry struct {
	Name     string        `toml:"name"`
	Source   string        `toml:"source"`
	Version  string        `toml:"version"`
	Digest   string        `toml:"digest"`
	Protocol string        `toml:"protocol,omitempty"`
	Granted  policy.Grants `toml:"granted"`
	Read     []string      `toml:"read,omitempty"`
	// Tools are the approved tool definitions (pins), by tool name.
	Tools map[string]string `toml:"tools,omitempty"`
	NPM   *NPMRequest       `toml:"npm,omitempty"`
	PyPI  *PyPIRequest      `toml:"pypi,omitempty"`
	// OCI is an image plugin's request and the manifest digest it runs (sync fetches by it).
	OCI *OCIRecord `toml:"oci,omitempty"`
}

// ReadLock reads dir/fledge.lock (bounded, never through a symlink, never a file with a
// second hard link: a sandbox view keeps the path fledge.lock read-only, not the file, so a
// link made to a file of a confined command's own would let it rewrite the lock).
func ReadLock(dir string) (*Lock, error) {
	path := filepath.Join(dir, ProjectLockFile)
	if st, err := os.Lstat(path); err == nil {
		if n := hardLinks(st); n > 1 {
			return nil, fmt.Errorf("%w: %s has %d hard links (another file can rewrite it); copy it to a file of its own", ErrBadLock, path, n)
		}
	}
	data, err := readRegular(path, MaxLockBytes)
	if err != nil {
		return nil, err
	}
	var l Lock
	if _, err := toml.Decode(string(data), &l); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadLock, err)
	}
	if l.Version != LockVersion {
		return nil, fmt.Errorf("%w: version %d (this fledge reads %d)", ErrBadLock, l.Version, LockVersion)
	}
	seen := map[string]bool{}
	for i := range l.Plugins {
		e := &l.Plugins[i]
		switch {
		case !ValidName(e.Name) || seen[e.Name]:
			return nil, fmt.Errorf("%w: plugin %d has an invalid or duplicate name %q", ErrBadLock, i+1, clip.Bytes(e.Name, 80))
		case !strings.HasPrefix(e.Digest, "sha256:") || len(e.Digest) != 7+64:
			return nil, fmt.Errorf("%w: %s: digest %q is not sha256:<64 hex>", ErrBadLock, e.Name, clip.Bytes(e.Digest, 80))
		case !policy.ValidFilesystem(e.Granted.Filesystem):
			return nil, fmt.Errorf("%w: %s: filesystem grant %q", ErrBadLock, e.Name, clip.Bytes(e.Granted.Filesystem, 80))
		case e.Source == "" || badText(e.Source):
			return nil, fmt.Errorf("%w: %s: no source", ErrBadLock, e.Name)
		}
		if e.NPM != nil {
			if err := e.NPM.Check(); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadLock, e.Name, err)
			}
		}
		if e.PyPI != nil {
			if err := e.PyPI.Check(); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrBadLock, e.Name, err)
			}
		}
		seen[e.Name] = true
	}
	return &l, nil
}

// WriteLock writes dir/fledge.lock atomically (plugins by name).
func WriteLock(dir string, l *Lock) error {
	l.Version = LockVersion
	sort.Slice(l.Plugins, func(i, j int) bool { return l.Plugins[i].Name < l.Plugins[j].Name })
	var buf bytes.Buffer
	buf.WriteString("# fledge.lock: the plugins of this project, pinned. Written by `fledge plugins lock`;\n" +
		"# `fledge plugins sync` installs exactly these, with exactly these grants. Commit it.\n")
	if err := toml.NewEncoder(&buf).Encode(l); err != nil {
		return err
	}
	if buf.Len() > MaxLockBytes {
		return fmt.Errorf("%s: %w", ProjectLockFile, ErrTooLarge)
	}
	return writeFileAtomic(filepath.Join(dir, ProjectLockFile), buf.Bytes(), 0o644)
}

// TreeDigest is the content digest of an installed plugin dir: sha256 over every entry's
// path, kind, executable bit and content (a symlink's target), sorted by path, leaving out
// what the plugin writes at run time (data/, state.json). The same files give the same
// digest on every machine (no times, owners or other mode bits).
func TreeDigest(dir string) (string, error) {
	type ent struct{ rel, line string }
	var ents []ent
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, werr error) error {
		if werr != nil {
			return werr
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "data" || rel == StateFile {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if len(ents) >= 4*MaxTreeFiles {
			return fmt.Errorf("%w: more than %d entries", ErrTreeTooLarge, 4*MaxTreeFiles)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch m := info.Mode(); {
		case m.IsDir():
			ents = append(ents, ent{rel, "d " + rel})
		case m&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			ents = append(ents, ent{rel, "l " + rel + " " + t})
		case m.IsRegular():
			total += info.Size()
			if total > 4*MaxTreeBytes {
				return fmt.Errorf("%w: more than %d bytes", ErrTreeTooLarge, 4*MaxTreeBytes)
			}
			f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			x := "-"
			if m.Perm()&0o111 != 0 {
				x = "x"
			}
			ents = append(ents, ent{rel, "f " + rel + " " + x + " " + hex.EncodeToString(h.Sum(nil))})
		default:
			return fmt.Errorf("%w: %s is not a file, dir or symlink", ErrUnsafeTree, rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].rel < ents[j].rel })
	h := sha256.New()
	for _, e := range ents {
		// A path holds no newline or NUL that could make two trees hash alike: names with
		// them are refused.
		if strings.ContainsAny(e.rel, "\n\x00") {
			return "", fmt.Errorf("%w: a name with a newline", ErrUnsafeTree)
		}
		io.WriteString(h, e.line+"\n")
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// VerifyDigest checks the installed plugin dir against want (TreeDigest).
func VerifyDigest(dir, want string) error {
	got, err := TreeDigest(dir)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: its files hash to %s, pinned %s", ErrDigestMismatch, short(got), short(want))
	}
	return nil
}

func short(d string) string {
	if len(d) > 7+16 {
		return d[:7+16]
	}
	return d
}
